import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO } from '../compiler/project-helpers.ts';

/**
 * The import rules of ARCHITECTURE.md ("What each folder must never import"), checked on the
 * source: a rule that only lives in prose is broken by the first hurried import.
 */

interface Edge {
  from: string; // repository-relative file
  to: string; // repository-relative file, or a bare package name
  /** False for `import type` / `export type` and for imports whose every name is `type X`. */
  value: boolean;
}

const SPEC = /^\s*(import|export)\s+(type\s+)?([^'"]*?)\s*from\s+'([^']+)'/gm;

function edgesOf(file: string): Edge[] {
  const text = readFileSync(join(REPO, file), 'utf8');
  const out: Edge[] = [];
  for (const m of text.matchAll(SPEC)) {
    const [, , typeOnly, names = '', spec = ''] = m;
    const braces = /\{([^}]*)\}/.exec(names);
    const outside = names.replace(/\{[^}]*\}/, '').replace(/,/g, '').trim();
    const inside = braces?.[1]?.split(',').map((s) => s.trim()).filter(Boolean) ?? [];
    const value = typeOnly === undefined && (outside !== '' || inside.some((n) => !n.startsWith('type ')));
    const to = spec.startsWith('.') ? relative(REPO, resolve(dirname(join(REPO, file)), spec)) : spec;
    out.push({ from: file, to, value });
  }
  return out;
}

function filesUnder(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const name of readdirSync(join(REPO, d)).sort()) {
      const rel = join(d, name);
      if (name === 'node_modules' || name === 'guest') continue;
      if (statSync(join(REPO, rel)).isDirectory()) walk(rel);
      else if (/\.ts$/.test(name) && !/\.(test|d)\.ts$/.test(name)) out.push(rel);
    }
  };
  walk(dir);
  return out;
}

const inside = (path: string, folder: string) => path === folder || path.startsWith(`${folder}/`);

/** [folder, folders or packages it must never import, with the reason ARCHITECTURE.md gives]. */
const NEVER: [string, string[]][] = [
  ['contracts', ['sdk', 'compiler', 'host-functions', 'engine', 'cli', 'pg', 'fastify']],
  ['sdk', ['compiler', 'host-functions', 'engine', 'cli', 'pg', 'fastify', 'ts-morph', 'esbuild']],
  ['compiler', ['engine', 'cli', 'host-functions/runtime', 'pg', 'fastify']],
  ['host-functions', ['sdk', 'compiler', 'engine', 'cli', 'pg']],
  ['engine', ['sdk', 'compiler', 'cli', 'ts-morph']],
  // HTTP is the API's: the layers under it serve in-process callers and the API alike
  ['engine/runtime', ['engine/api', 'fastify', 'esbuild']],
  // the pure core: no I/O, no clock source, no randomness, no other engine layer
  [
    'engine/core',
    ['engine/store', 'engine/runtime', 'engine/executors', 'engine/api', 'engine/testing', 'host-functions', 'pg', 'node:fs', 'node:http', 'node:https', 'node:net', 'node:timers'],
  ],
  ['engine/store', ['engine/runtime', 'engine/executors', 'engine/api', 'engine/testing', 'fastify', 'esbuild']],
  ['engine/executors', ['engine/store', 'engine/runtime', 'engine/api', 'pg', 'fastify', 'esbuild']],
  ['client', ['engine', 'sdk', 'compiler', 'cli', 'host-functions', 'pg', 'fastify']],
];

describe('import rules of ARCHITECTURE.md', () => {
  for (const [folder, banned] of NEVER) {
    it(`${folder}/ never imports ${banned.join(', ')}`, () => {
      const broken = filesUnder(folder)
        .flatMap(edgesOf)
        .filter((e) => !inside(e.to, folder) && banned.some((b) => inside(e.to, b)))
        .map((e) => `${e.from} → ${e.to}`);
      expect(broken).toEqual([]);
    });
  }

  it('engine/core takes no clock or randomness from the machine', () => {
    const code = (f: string) => readFileSync(join(REPO, f), 'utf8').replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '');
    const found = filesUnder('engine/core').filter((f) => /\b(Date\.now|new Date\(\)|Math\.random|randomUUID|performance\.now)\b/.test(code(f)));
    expect(found).toEqual([]);
  });

  it('engine/core has no value import cycle', () => {
    const files = filesUnder('engine/core');
    const graph = new Map(files.map((f) => [f, edgesOf(f).filter((e) => e.value && files.includes(`${e.to}`)).map((e) => e.to)]));
    const cycles: string[] = [];
    const path: string[] = [];
    const done = new Set<string>();
    const visit = (f: string) => {
      const at = path.indexOf(f);
      if (at >= 0) return void cycles.push([...path.slice(at), f].join(' → '));
      if (done.has(f)) return;
      path.push(f);
      for (const to of graph.get(f) ?? []) visit(to);
      path.pop();
      done.add(f);
    };
    for (const f of files) visit(f);
    expect(cycles).toEqual([]);
  });
});
