import { readdirSync, readFileSync } from 'node:fs';
import { dirname, extname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ts } from 'ts-morph';
import { describe, expect, it } from 'vitest';

/**
 * docs/errors.md against the source, both ways: every stable error code a string literal in the
 * source carries has a row in the catalogue, and every code in the catalogue is still raised.
 */

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const CATALOGUE = join(ROOT, 'docs/errors.md');
const SOURCE_DIRS = ['contracts', 'sdk', 'compiler', 'host-functions', 'engine', 'cli', 'client'];
const SOURCE_EXTENSIONS = new Set(['.ts', '.mjs']);
const CODE = /\b(?:FLOW|FUNC|COMPILE|SDK|PUBLISH|CLI)_[A-Z0-9_]+\b/g;
const WHOLE_CODE = /^(?:FLOW|FUNC|COMPILE|SDK|PUBLISH|CLI)_[A-Z0-9_]+$/;
/** Engine settings read from the environment; `FLOW_HANDLER_<NAME>_URL` / `_TOKEN` come on top. */
const KNOWN_ENV_NAMES = ['FLOW_CALLBACK_ALLOWLIST', 'FLOW_ENV', 'FLOW_EVENT_SINK_URL', 'FLOW_HTTP_ALLOWLIST', 'FLOW_OUTBOX_SECRET', 'FLOW_SCHEMA', 'FLOW_TOKEN_SECRET'];

function sourceFiles(dir: string): string[] {
  const files: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name === 'node_modules') continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) files.push(...sourceFiles(path));
    else if (entry.isFile() && SOURCE_EXTENSIONS.has(extname(entry.name))) files.push(path);
  }
  return files;
}

/** `process.env`, `env`, `opts.env`: an object whose keys are environment variable names. */
function isEnvObject(node: ts.Expression): boolean {
  if (ts.isIdentifier(node)) return node.text === 'env';
  return ts.isPropertyAccessExpression(node) && node.name.text === 'env';
}

/** The name of an environment variable that `node` reads (`process.env['X']`, `env.X`), if any. */
function envNameRead(node: ts.Node): string | null {
  if (ts.isElementAccessExpression(node) && isEnvObject(node.expression) && ts.isStringLiteralLike(node.argumentExpression)) {
    return node.argumentExpression.text;
  }
  if (ts.isPropertyAccessExpression(node) && isEnvObject(node.expression)) return node.name.text;
  return null;
}

/**
 * Codes in one piece of literal text. In a template, a match that runs into a `${…}` is part of a
 * name built at run time (`FLOW_HANDLER_${name}_URL`), not a code.
 */
function codesInText(text: string, opensOnSubstitution: boolean, closesOnSubstitution: boolean): string[] {
  const codes: string[] = [];
  for (const m of text.matchAll(CODE)) {
    const start = m.index;
    const end = start + m[0].length;
    if ((opensOnSubstitution && start === 0) || (closesOnSubstitution && end === text.length)) continue;
    codes.push(m[0]);
  }
  return codes;
}

interface SourceScan {
  /** Each code found in a string or template literal, with where it first appears. */
  codes: Map<string, string>;
  /** Environment variable names the source reads. */
  envNames: Set<string>;
}

function scanSource(): SourceScan {
  const found = new Map<string, string>();
  const envNames = new Set<string>();
  const files = SOURCE_DIRS.flatMap((d) => sourceFiles(join(ROOT, d))).sort();
  for (const file of files) {
    const kind = file.endsWith('.mjs') ? ts.ScriptKind.JS : ts.ScriptKind.TS;
    const sf = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true, kind);
    const record = (codes: string[], node: ts.Node) => {
      const line = sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1;
      for (const code of codes) if (!found.has(code)) found.set(code, `${relative(ROOT, file)}:${line}`);
    };
    const visit = (node: ts.Node): void => {
      const envName = envNameRead(node);
      if (envName !== null) envNames.add(envName);
      if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) {
        // a key of an env object is a variable name, not a code
        const parent = node.parent;
        const isEnvKey = ts.isElementAccessExpression(parent) && parent.argumentExpression === node && isEnvObject(parent.expression);
        if (!isEnvKey) record(codesInText(node.text, false, false), node);
      } else if (ts.isTemplateHead(node)) {
        record(codesInText(node.text, false, true), node);
      } else if (ts.isTemplateMiddle(node)) {
        record(codesInText(node.text, true, true), node);
      } else if (ts.isTemplateTail(node)) {
        record(codesInText(node.text, true, false), node);
      }
      ts.forEachChild(node, visit);
    };
    visit(sf);
  }
  const codes = new Map([...found].filter(([code]) => !envNames.has(code)));
  return { codes, envNames };
}

interface CatalogueScan {
  /** Each code in the first column of a table, with the lines it is listed on. */
  codes: Map<string, number[]>;
}

function scanCatalogue(): CatalogueScan {
  const codes = new Map<string, number[]>();
  for (const [i, line] of readFileSync(CATALOGUE, 'utf8').split('\n').entries()) {
    if (!line.trimStart().startsWith('|')) continue;
    const firstCell = line.trim().slice(1).split('|')[0] ?? '';
    for (const m of firstCell.matchAll(/`([^`]+)`/g)) {
      const code = m[1]!.trim();
      if (!WHOLE_CODE.test(code)) continue;
      codes.set(code, [...(codes.get(code) ?? []), i + 1]);
    }
  }
  return { codes };
}

function listing(title: string, lines: string[]): string {
  return `${title} (${lines.length}):\n  ${lines.join('\n  ')}`;
}

describe('docs/errors.md, the error catalogue', () => {
  const source = scanSource();
  const catalogue = scanCatalogue();

  it('finds error codes in the source and counts no environment variable name as one', () => {
    expect(source.codes.size).toBeGreaterThan(0);
    expect(source.envNames.size).toBeGreaterThan(0);
    const envNamesTakenForCodes = [...source.codes.keys()].filter(
      (c) => source.envNames.has(c) || KNOWN_ENV_NAMES.includes(c) || c.startsWith('FLOW_HANDLER_'),
    );
    expect(envNamesTakenForCodes, 'environment variable names collected as error codes').toEqual([]);
  });

  it('documents every error code raised in the source', () => {
    const undocumented = [...source.codes].filter(([code]) => !catalogue.codes.has(code)).map(([code, at]) => `${code} (${at})`);
    expect(undocumented, listing('raised in code but not documented in docs/errors.md', undocumented)).toEqual([]);
  });

  it('documents only codes that the source still raises', () => {
    const stale = [...catalogue.codes]
      .filter(([code]) => !source.codes.has(code))
      .map(([code, lines]) => `${code} (docs/errors.md:${lines.join(',')})`);
    expect(stale, listing('documented but not raised anywhere', stale)).toEqual([]);
  });

  it('gives each code exactly one row', () => {
    const repeated = [...catalogue.codes]
      .filter(([, lines]) => lines.length > 1)
      .map(([code, lines]) => `${code} (docs/errors.md:${lines.join(',')})`);
    expect(repeated, listing('documented in more than one row', repeated)).toEqual([]);
  });
});
