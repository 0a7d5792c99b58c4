#!/usr/bin/env node
// The s8flow command. The CLI is TypeScript; it runs from a bundle that bin/cli-bundle.mjs keeps
// in step with the sources, or, where that bundle cannot be built, from the sources through tsx.
import { fileURLToPath, pathToFileURL } from 'node:url';
import { cacheDirFor, freshBundle } from './cli-bundle.mjs';

// Extism loads node:wasi, which Node 20 reports as experimental in every process that loads it,
// though the engine never turns WASI on (its worker threads run with the warning off too).
const emitWarning = process.emitWarning;
process.emitWarning = (warning, ...rest) => {
  if (!String(warning).startsWith('WASI is an experimental feature')) emitWarning.call(process, warning, ...rest);
};

const root = fileURLToPath(new URL('../', import.meta.url));
let cli;
try {
  const bundle = await freshBundle({ root, entry: `${root}cli/main.ts`, cacheDir: cacheDirFor(root) });
  cli = await import(pathToFileURL(bundle).href);
} catch (err) {
  if (process.env.FLOW_CLI_DEBUG) console.error('s8flow: running from source:', err);
  const { register } = await import('tsx/esm/api');
  register();
  cli = await import('../cli/main.ts');
}
process.exitCode = await cli.main(process.argv.slice(2));
