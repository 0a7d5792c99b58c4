import { transformSync } from 'esbuild';
import jsonata from 'jsonata';
import { Project, SyntaxKind, ts } from 'ts-morph';
import type { CompileDiagnostic } from '../../compiler/errors.ts';
import { ExprError, STEP_ROOTS, translateMapping } from '../../compiler/translate/index.ts';

const project = new Project({
  useInMemoryFileSystem: true,
  compilerOptions: { strict: true, target: ts.ScriptTarget.ES2022, lib: ['lib.es2023.d.ts'], noUncheckedIndexedAccess: true },
});
let counter = 0;

/** The source file a mapping is compiled in: the context type, then the mapping on line 2. */
function sourceOf(ctxType: string, src: string): string {
  return `type Ctx = ${ctxType};\nexport const f: (ctx: Ctx) => unknown = ${src};\n`;
}

function mappingNode(ctxType: string, src: string) {
  const sf = project.createSourceFile(`m${counter++}.ts`, sourceOf(ctxType, src));
  return sf.getFirstDescendantByKindOrThrow(SyntaxKind.ArrowFunction);
}

/** Translates one mapping written against `ctxType`. */
export function toJsonata(ctxType: string, src: string, roots: readonly string[] = STEP_ROOTS): string {
  return translateMapping(mappingNode(ctxType, src), roots);
}

/** The diagnostic a mapping fails with, or null when it translates. */
export function translationError(ctxType: string, src: string): CompileDiagnostic | null {
  try {
    translateMapping(mappingNode(ctxType, src), STEP_ROOTS);
    return null;
  } catch (err) {
    if (err instanceof ExprError) return err.toDiagnostic('mapping.ts');
    throw err;
  }
}

/** 1-based line and column of the first `marker` in the mapping, within the generated source. */
export function positionOf(ctxType: string, src: string, marker: string): { line: number; column: number } {
  const text = sourceOf(ctxType, src);
  const lineStart = text.indexOf('export const f');
  const index = text.indexOf(marker, lineStart);
  if (index < 0) throw new Error(`marker ${marker} not in ${src}`);
  return { line: text.slice(0, lineStart).split('\n').length, column: index - lineStart + 1 };
}

/** The mapping compiled to JavaScript, as the author's code would run. */
export function toFunction(src: string): (ctx: unknown) => unknown {
  const js = transformSync(`(${src})`, { loader: 'ts' }).code.trim().replace(/;$/, '');
  return new Function(`return ${js}`)() as (ctx: unknown) => unknown;
}

/** What a value becomes in stored JSON (undefined stays undefined). */
export function asJson(value: unknown): unknown {
  return value === undefined ? undefined : JSON.parse(JSON.stringify(value));
}

const compiled = new Map<string, ReturnType<typeof jsonata>>();
export async function evaluate(expr: string, ctx: unknown): Promise<unknown> {
  let e = compiled.get(expr);
  if (e === undefined) {
    e = jsonata(expr);
    compiled.set(expr, e);
  }
  return asJson(await e.evaluate(ctx));
}
