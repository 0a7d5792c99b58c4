import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

export interface ConsoleBundle {
  js: string;
  css: string;
}

const ENTRY = fileURLToPath(new URL('../../console/main.tsx', import.meta.url));
const CSS = fileURLToPath(new URL('../../console/console.css', import.meta.url));

let bundled: Promise<ConsoleBundle> | null = null;

/**
 * The console's script and stylesheet, bundled by esbuild from `console/` once per process, in
 * memory (about 100 ms): a fresh clone needs no build step, and nothing is fetched from a CDN.
 */
export function consoleBundle(): Promise<ConsoleBundle> {
  bundled ??= Promise.all([
    build({
      entryPoints: [ENTRY],
      bundle: true,
      write: false,
      minify: true,
      format: 'esm',
      target: 'es2022',
      jsx: 'automatic',
      jsxImportSource: 'preact',
      legalComments: 'none',
    }),
    build({ entryPoints: [CSS], bundle: true, write: false, minify: true }),
  ]).then(([js, css]) => ({ js: js.outputFiles[0]!.text, css: css.outputFiles[0]!.text }));
  return bundled;
}
