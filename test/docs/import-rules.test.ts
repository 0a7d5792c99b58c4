import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { REPO } from '../compiler/project-helpers.ts';

/**
 * The import rules of ARCHITECTURE.md ("What each folder must never import"), checked on the
 * source: a rule that only lives in prose is broken by the first hurried import.
 */

interface Edge {
  from: string; // repository-relative file
  to: string; // repository-relative file, or a bare package name
  /** False for `import type` / `export type`, imports whose every name is `type X`, and `import('x').T` types. */
  value: boolean;
}

/**
 * Every module a file reaches, read from its syntax tree: static, side-effect (`import 'x'`),
 * re-export (`export * from 'x'`), dynamic (`import('x')`) and `require('x')`. A regular
 * expression over the text misses the forms it was not written for.
 */
function edgesOf(file: string): Edge[] {
  const text = readFileSync(join(REPO, file), 'utf8');
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false, file.endsWith('x') ? ts.ScriptKind.TSX : undefined);
  const out: Edge[] = [];
  const add = (spec: string, value: boolean) =>
    out.push({ from: file, to: spec.startsWith('.') ? relative(REPO, resolve(dirname(join(REPO, file)), spec)) : spec, value });
  const allTypes = (names: readonly { isTypeOnly: boolean }[]) => names.length > 0 && names.every((n) => n.isTypeOnly);
  const visit = (n: ts.Node) => {
    if (ts.isImportDeclaration(n) && ts.isStringLiteral(n.moduleSpecifier)) {
      const clause = n.importClause;
      const named = clause?.namedBindings;
      const typeOnly = clause !== undefined && (clause.isTypeOnly || (clause.name === undefined && named !== undefined && ts.isNamedImports(named) && allTypes(named.elements)));
      add(n.moduleSpecifier.text, !typeOnly);
    } else if (ts.isExportDeclaration(n) && n.moduleSpecifier !== undefined && ts.isStringLiteral(n.moduleSpecifier)) {
      const named = n.exportClause;
      add(n.moduleSpecifier.text, !(n.isTypeOnly || (named !== undefined && ts.isNamedExports(named) && allTypes(named.elements))));
    } else if (ts.isCallExpression(n) && (n.expression.kind === ts.SyntaxKind.ImportKeyword || (ts.isIdentifier(n.expression) && n.expression.text === 'require'))) {
      const spec = n.arguments[0];
      if (spec !== undefined && ts.isStringLiteralLike(spec)) add(spec.text, true);
    } else if (ts.isImportTypeNode(n) && ts.isLiteralTypeNode(n.argument) && ts.isStringLiteral(n.argument.literal)) {
      add(n.argument.literal.text, false);
    }
    ts.forEachChild(n, visit);
  };
  visit(source);
  return out;
}

function filesUnder(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const name of readdirSync(join(REPO, d)).sort()) {
      const rel = join(d, name);
      // host-functions/guest is AssemblyScript, built by asc for the guest side; it is no module of the host
      if (name === 'node_modules' || name === 'guest') continue;
      if (statSync(join(REPO, rel)).isDirectory()) walk(rel);
      else if (/\.(ts|tsx|mts|cts|mjs|cjs|js)$/.test(name) && !/\.(test|d)\.ts$/.test(name)) out.push(rel);
    }
  };
  walk(dir);
  return out;
}

const inside = (path: string, folder: string) => path === folder || path.startsWith(`${folder}/`);

/** The folders that ship. */
const PRODUCT = ['contracts', 'sdk', 'compiler', 'host-functions', 'engine', 'cli', 'console', 'client'];

/** The OpenTelemetry SDK packages: only `cli/telemetry-sdk.ts` imports them. */
const OTEL_SDK = ['@opentelemetry/sdk-node', '@opentelemetry/exporter-trace-otlp-proto', '@opentelemetry/exporter-trace-otlp-http', '@opentelemetry/sdk-trace-base'];

/** [folder, folders or packages it must never import, with the reason ARCHITECTURE.md gives]. */
const NEVER: [string, string[]][] = [
  ['contracts', ['sdk', 'compiler', 'host-functions', 'engine', 'cli', 'pg', 'fastify']],
  ['sdk', ['compiler', 'host-functions', 'engine', 'cli', 'pg', 'fastify', 'ts-morph', 'esbuild']],
  ['compiler', ['engine', 'cli', 'host-functions/runtime', 'pg', 'fastify']],
  ['host-functions', ['sdk', 'compiler', 'engine', 'cli', 'pg']],
  // spans through @opentelemetry/api alone: the SDK and its exporter are the operator's, loaded by `s8flow start`
  ['engine', ['sdk', 'compiler', 'cli', 'ts-morph', ...OTEL_SDK]],
  // HTTP is the API's: the layers under it serve in-process callers and the API alike
  ['engine/runtime', ['engine/api', 'fastify', 'esbuild']],
  // the pure core: no I/O, no clock source, no randomness, no other engine layer
  [
    'engine/core',
    [
      'engine/store',
      'engine/runtime',
      'engine/executors',
      'engine/api',
      'engine/testing',
      'host-functions',
      'pg',
      'node:fs',
      'node:http',
      'node:https',
      'node:net',
      'node:timers',
      '@opentelemetry/api',
    ],
  ],
  ['engine/store', ['engine/runtime', 'engine/executors', 'engine/api', 'engine/testing', 'fastify', 'esbuild']],
  ['engine/executors', ['engine/store', 'engine/runtime', 'engine/api', 'pg', 'fastify', 'esbuild']],
  // the API sits on the runtime: it runs no effect itself and never reaches the in-process runner
  ['engine/api', ['engine/executors', 'engine/testing', 'host-functions', 'pg']],
  // the in-process runner: no database, no HTTP
  ['engine/testing', ['engine/store', 'engine/api', 'pg', 'fastify', 'esbuild']],
  ['client', ['engine', 'sdk', 'compiler', 'cli', 'host-functions', 'pg', 'fastify', ...OTEL_SDK]],
  // the console reaches the engine only through the HTTP API, as any other client
  ['console', ['engine', 'sdk', 'compiler', 'cli', 'host-functions', 'client', 'pg', 'fastify', 'zod', 'node:fs', 'node:path']],
  ['cli', ['console', 'engine/testing']],
  // the product never reaches into the test suites, the benchmarks or the examples
  ...PRODUCT.map((folder): [string, string[]] => [folder, ['test', 'bench', 'examples']]),
];

/**
 * Value imports the console may make from contracts/: zod-free helpers only. Everything else
 * it takes from contracts/ is a type, erased from the bundle, so the page never carries zod.
 */
const CONSOLE_VALUES_FROM_CONTRACTS = ['contracts/scopes.ts', 'contracts/timeline.ts', 'contracts/erasure.ts', 'contracts/migrate-limits.ts'];

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

  it('the OpenTelemetry SDK is imported by cli/telemetry-sdk.ts alone, which only cli/telemetry.ts reaches, by import()', () => {
    const edges = PRODUCT.flatMap(filesUnder).flatMap(edgesOf);
    expect(edges.filter((e) => e.value && OTEL_SDK.includes(e.to)).map((e) => e.from).filter((f) => f !== 'cli/telemetry-sdk.ts')).toEqual([]);
    const reach = edges.filter((e) => e.value && e.to === 'cli/telemetry-sdk.ts').map((e) => e.from);
    expect(reach).toEqual(['cli/telemetry.ts']);
    // the one edge is a dynamic import: with tracing off, nothing of the SDK is loaded
    expect(readFileSync(join(REPO, 'cli/telemetry.ts'), 'utf8')).toMatch(/import\('\.\/telemetry-sdk\.ts'\)/);
    expect(readFileSync(join(REPO, 'cli/telemetry.ts'), 'utf8')).not.toMatch(/^import .*telemetry-sdk/m);
  });

  it('engine/core takes no clock or randomness from the machine', () => {
    const code = (f: string) => readFileSync(join(REPO, f), 'utf8').replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '');
    const found = filesUnder('engine/core').filter((f) => /\b(Date\.now|new Date\(\)|Math\.random|randomUUID|performance\.now)\b/.test(code(f)));
    expect(found).toEqual([]);
  });

  it('console/ takes only types from contracts/, but for zod-free helpers', () => {
    const values = filesUnder('console')
      .flatMap(edgesOf)
      .filter((e) => e.value && inside(e.to, 'contracts') && !CONSOLE_VALUES_FROM_CONTRACTS.includes(e.to))
      .map((e) => `${e.from} → ${e.to}`);
    expect(values).toEqual([]);
    const zodInHelpers = CONSOLE_VALUES_FROM_CONTRACTS.flatMap(edgesOf).filter((e) => e.value && (e.to === 'zod' || !inside(e.to, 'contracts') || !CONSOLE_VALUES_FROM_CONTRACTS.includes(e.to)));
    expect(zodInHelpers).toEqual([]);
  });

  it('no value import cycle anywhere in the product', () => {
    const files = PRODUCT.flatMap(filesUnder);
    const known = new Set(files);
    const graph = new Map(files.map((f) => [f, edgesOf(f).filter((e) => e.value && known.has(e.to)).map((e) => e.to)]));
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
