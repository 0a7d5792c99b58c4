import { createRequire } from 'node:module';
import type Jsonata from 'jsonata';
import type { LogicVersion, StepDef } from './logic-version.ts';

/**
 * jsonata is CommonJS, and an ESM `import` of it makes Node lex its 300 KB for export names before
 * running it: 75–230 ms of every cold `s8flow compile` on the shared box (profiled), for a default
 * export `require` hands over as is.
 */
const jsonata = createRequire(import.meta.url)('jsonata') as typeof Jsonata;

/** Functions that would make a replay decide differently from the original run. */
export const FORBIDDEN_FUNCTIONS = ['now', 'millis', 'random'] as const;

/** Every expression of a LogicVersion with its JSON path, so checks and compilers can walk them. */
export function* expressionsOf(doc: LogicVersion): Generator<{ path: string; expr: string }> {
  if (doc.output !== undefined) yield { path: 'output', expr: doc.output };
  for (const [i, trigger] of (doc.triggers ?? []).entries()) {
    if (!('message' in trigger)) {
      yield { path: `triggers.${i}.input`, expr: trigger.input };
      continue;
    }
    const { match } = trigger;
    yield 'correlationId' in match ? { path: `triggers.${i}.match.correlationId`, expr: match.correlationId } : { path: `triggers.${i}.match.value`, expr: match.value };
    if (trigger.payload !== undefined) yield { path: `triggers.${i}.payload`, expr: trigger.payload };
  }
  for (const [name, a] of Object.entries(doc.attributes ?? {})) if (a.value !== undefined) yield { path: `attributes.${name}.value`, expr: a.value };
  if (doc.concurrency !== undefined) yield { path: 'concurrency.key', expr: doc.concurrency.key };
  for (const [name, step] of Object.entries(doc.steps)) yield* stepExpressions(`steps.${name}`, step);
}

function* stepExpressions(at: string, step: StepDef): Generator<{ path: string; expr: string }> {
  if (step.input !== undefined) yield { path: `${at}.input`, expr: step.input };
  if (step.compensate?.input !== undefined) yield { path: `${at}.compensate.input`, expr: step.compensate.input };
  if (step.compensate?.kind === 'http' && !isLiteralUrl(step.compensate.url))
    yield { path: `${at}.compensate.url`, expr: step.compensate.url };
  if ('attributes' in step) for (const [name, expr] of Object.entries(step.attributes ?? {})) yield { path: `${at}.attributes.${name}`, expr };
  if ('concurrency' in step && step.concurrency !== undefined) yield { path: `${at}.concurrency.key`, expr: step.concurrency.key };
  switch (step.kind) {
    case 'http':
      if (!isLiteralUrl(step.url)) yield { path: `${at}.url`, expr: step.url };
      break;
    case 'delay':
      if (step.until !== undefined) yield { path: `${at}.until`, expr: step.until };
      break;
    case 'children':
      yield { path: `${at}.items`, expr: step.items };
      yield { path: `${at}.itemInput`, expr: step.itemInput };
      break;
    case 'emit':
      yield { path: `${at}.payload`, expr: step.payload };
      break;
    case 'choice':
      for (const [i, b] of step.branches.entries()) yield { path: `${at}.branches.${i}.when`, expr: b.when };
      break;
    default:
      break;
  }
}

/** An http `url` is a literal when it starts with a scheme; otherwise it is an expression. */
export function isLiteralUrl(url: string): boolean {
  return /^https?:\/\//.test(url);
}

/**
 * Parses an expression and reports forbidden functions. Returns the problem, or null.
 * The AST walk is generic so that nested lambdas and paths are covered too.
 */
export function checkExpression(expr: string): { kind: 'syntax' | 'forbidden'; message: string } | null {
  let ast: unknown;
  try {
    ast = jsonata(expr).ast();
  } catch (err) {
    const e = err as { message?: string; position?: number };
    return { kind: 'syntax', message: `JSONata does not parse: ${e.message} (at character ${e.position ?? '?'})` };
  }
  const found = findForbidden(ast);
  return found === null
    ? null
    : { kind: 'forbidden', message: `$${found}() is not allowed: it would make a replay decide differently` };
}

function findForbidden(node: unknown): string | null {
  if (Array.isArray(node)) {
    for (const n of node) {
      const f = findForbidden(n);
      if (f !== null) return f;
    }
    return null;
  }
  if (node === null || typeof node !== 'object') return null;
  const n = node as Record<string, unknown>;
  if (n['type'] === 'variable' && (FORBIDDEN_FUNCTIONS as readonly unknown[]).includes(n['value'])) {
    return n['value'] as string;
  }
  for (const v of Object.values(n)) {
    const f = findForbidden(v);
    if (f !== null) return f;
  }
  return null;
}
