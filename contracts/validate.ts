import { logicVersionHash } from './canonical-json.ts';
import { type LogicVersionIssue, LogicIssueCode, LogicVersionInvalid } from './errors.ts';
import { checkExpression, expressionsOf } from './expressions.ts';
import { isReservedHeader } from './http-headers.ts';
import { LogicVersion, type StepDef } from './logic-version.ts';
import { unstorableText } from './storable-text.ts';

/**
 * Validates a LogicVersion document: the zod schema first, then the structural checks the schema
 * cannot express (targets exist, every step reachable, modules declared, expressions parse and are
 * replay-safe, and the hash matches). Throws `LogicVersionInvalid` listing every issue.
 */
export function parseLogicVersion(doc: unknown, opts: { checkHash?: boolean } = {}): LogicVersion {
  const parsed = LogicVersion.safeParse(doc);
  const label = labelOf(doc);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => ({
      code: LogicIssueCode.schema,
      path: i.path.join('.'),
      message: i.message,
    }));
    throw new LogicVersionInvalid(label, issues);
  }
  const issues = [...unstorableIssues(doc), ...structuralIssues(parsed.data)];
  if (opts.checkHash !== false) {
    const expected = logicVersionHash(doc as Record<string, unknown>);
    if (parsed.data.hash !== expected) {
      issues.push({
        code: LogicIssueCode.hashMismatch,
        path: 'hash',
        message: `hash is ${parsed.data.hash} but the content hashes to ${expected}; recompile instead of editing by hand`,
      });
    }
  }
  if (issues.length > 0) throw new LogicVersionInvalid(label, issues);
  return parsed.data;
}

/**
 * Strings (keys or values) Postgres cannot store (storable-text.ts), each with its path: such a
 * document would be refused by the store itself, with no code, after the checks had passed.
 */
function unstorableIssues(doc: unknown): LogicVersionIssue[] {
  const issues: LogicVersionIssue[] = [];
  const walk = (v: unknown, path: string[]): void => {
    if (typeof v === 'string') {
      const why = unstorableText(v);
      if (why !== null) issues.push({ code: LogicIssueCode.unstorable, path: path.join('.'), message: `the text ${why}` });
    } else if (Array.isArray(v)) {
      for (const [i, x] of v.entries()) walk(x, [...path, String(i)]);
    } else if (v !== null && typeof v === 'object') {
      for (const [k, x] of Object.entries(v)) {
        const why = unstorableText(k);
        if (why !== null) issues.push({ code: LogicIssueCode.unstorable, path: [...path, '(a key)'].join('.'), message: `the key ${why}` });
        walk(x, [...path, k]);
      }
    }
  };
  walk(doc, []);
  return issues;
}

/** The steps a step can route to, with the field that names each. */
export function routesOf(step: StepDef): { field: string; target: string }[] {
  const routes: { field: string; target: string }[] = [];
  if (step.next) routes.push({ field: 'next', target: step.next });
  if (step.onError) routes.push({ field: 'onError', target: step.onError });
  if (step.kind === 'choice') {
    step.branches.forEach((b, i) => {
      routes.push({ field: `branches.${i}.next`, target: b.next });
    });
    routes.push({ field: 'otherwise', target: step.otherwise });
  }
  if (step.kind === 'decision' && step.onTimeout) routes.push({ field: 'onTimeout', target: step.onTimeout });
  return routes;
}

export function structuralIssues(doc: LogicVersion): LogicVersionIssue[] {
  const issues: LogicVersionIssue[] = [];
  const names = new Set(Object.keys(doc.steps));
  if (!names.has(doc.start)) {
    issues.push({ code: LogicIssueCode.unknownTarget, path: 'start', message: `start names "${doc.start}", no such step` });
  }
  for (const [name, step] of Object.entries(doc.steps)) {
    for (const { field, target } of routesOf(step)) {
      if (!names.has(target)) {
        issues.push({
          code: LogicIssueCode.unknownTarget,
          path: `steps.${name}.${field}`,
          message: `routes to "${target}", which is not a step`,
        });
      }
    }
    for (const [field, action] of [
      ['', step],
      ['compensate.', step.compensate],
    ] as const) {
      if (action?.kind !== 'http') continue;
      for (const header of Object.keys(action.headers ?? {}).filter(isReservedHeader)) {
        issues.push({
          code: LogicIssueCode.reservedHeader,
          path: `steps.${name}.${field}headers.${header}`,
          message: `an http step may not set ${header}: the transport and the engine own it`,
        });
      }
    }
    const moduleName = step.kind === 'func' ? step.module : step.compensate?.kind === 'func' ? step.compensate.module : null;
    if (moduleName !== null && doc.modules?.[moduleName] === undefined) {
      issues.push({
        code: LogicIssueCode.unknownModule,
        path: `steps.${name}.${step.kind === 'func' ? 'module' : 'compensate.module'}`,
        message: `module "${moduleName}" is not declared under modules`,
      });
    }
  }
  // a message trigger delivers to instances of this version: one of its waitFor steps must take it
  const taken = new Set(Object.values(doc.steps).flatMap((st) => (st.kind === 'waitFor' ? [st.message] : [])));
  for (const [i, t] of (doc.triggers ?? []).entries()) {
    if ('message' in t && !taken.has(t.message)) {
      issues.push({
        code: LogicIssueCode.unknownMessage,
        path: `triggers.${i}.message`,
        message: `the trigger on ${t.event} delivers message "${t.message}", which no waitFor step takes`,
      });
    }
  }
  const reachable = reachableFrom(doc);
  for (const name of names) {
    if (!reachable.has(name)) {
      issues.push({
        code: LogicIssueCode.unreachable,
        path: `steps.${name}`,
        message: `step "${name}" cannot be reached from start "${doc.start}"`,
      });
    }
  }
  for (const { path, expr } of expressionsOf(doc)) {
    const problem = checkExpression(expr);
    if (problem !== null) {
      const code = problem.kind === 'syntax' ? LogicIssueCode.exprSyntax : LogicIssueCode.exprForbidden;
      issues.push({ code, path, message: problem.message });
    }
  }
  return issues;
}

function reachableFrom(doc: LogicVersion): Set<string> {
  const seen = new Set<string>();
  const queue = [doc.start];
  while (queue.length > 0) {
    const name = queue.pop() as string;
    const step = doc.steps[name];
    if (seen.has(name) || step === undefined) continue;
    seen.add(name);
    for (const { target } of routesOf(step)) queue.push(target);
  }
  return seen;
}

function labelOf(doc: unknown): string {
  const d = (doc ?? {}) as { logicId?: unknown; version?: unknown };
  return `${String(d.logicId ?? '?')}@${String(d.version ?? '?')}`;
}
