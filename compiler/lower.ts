import type { Node } from 'ts-morph';
import { LOGIC_VERSION_SCHEMA } from '../contracts/logic-version.ts';
import type { DraftTrigger, WorkflowDraft } from '../sdk/draft.ts';
import { type CompileDiagnostic, CompileErrorCode } from './errors.ts';
import { locOf } from './instrument.ts';
import { ATTRIBUTE_ROOTS, ExprError, STEP_ROOTS, TRIGGER_ROOTS, translateMapping } from './translate/index.ts';

/** Where mapping functions come from: tagged syntax nodes, labelled for messages. */
export interface MappingSource {
  node(tag: string): Node | undefined;
  label(node: Node): string;
}

/**
 * A draft with every mapping function replaced by its JSONata translation: a LogicVersion without
 * `hash`, `modules` and `source`. Problems are appended to `diagnostics`.
 */
export function lowerDraft(
  draft: WorkflowDraft,
  where: string,
  source: MappingSource,
  diagnostics: CompileDiagnostic[],
): Record<string, unknown> {
  const at = `${draft.logicId}@${draft.version}`;
  const expr = (fn: unknown, path: string, roots: readonly string[]): string => {
    const tag = locOf(fn);
    const node = tag === undefined ? undefined : source.node(tag);
    if (node === undefined) {
      diagnostics.push({
        code: CompileErrorCode.exprNotInline,
        message: `${at} ${path}: the mapping is not an arrow function written in a workflow file`,
        file: where,
        hint: 'write mappings inline in files under the configured roots',
      });
      return '$error("untranslated")';
    }
    try {
      return translateMapping(node, roots);
    } catch (err) {
      if (!(err instanceof ExprError)) throw err;
      diagnostics.push(err.toDiagnostic(source.label(err.node)));
      return '$error("untranslated")';
    }
  };
  const walk = (value: unknown, path: string): unknown => {
    // a step's attribute mappings also see the step's own output
    if (typeof value === 'function') return expr(value, path, /\.attributes\.[^.]+$/.test(path) ? ATTRIBUTE_ROOTS : STEP_ROOTS);
    if (Array.isArray(value)) return value.map((v, i) => walk(v, `${path}.${i}`));
    if (typeof value === 'object' && value !== null) {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, walk(v, `${path}.${k}`)]));
    }
    return value;
  };
  const steps = Object.fromEntries(draft.steps.map(({ name, step }) => [name, walk(step, `steps.${name}`)]));
  return {
    schema: LOGIC_VERSION_SCHEMA,
    logicId: draft.logicId,
    version: draft.version,
    domain: draft.domain,
    ...(draft.description === undefined ? {} : { description: draft.description }),
    ...(draft.priority === undefined ? {} : { priority: draft.priority }),
    input: draft.input,
    start: draft.start,
    steps,
    ...(draft.output === undefined ? {} : { output: expr(draft.output, 'output', STEP_ROOTS) }),
    ...(draft.retention === undefined ? {} : { retention: { days: draft.retention.days } }),
    ...(draft.triggers.length === 0
      ? {}
      : { triggers: draft.triggers.map((t, i) => lowerTrigger(t, `triggers.${i}`, (fn, path) => expr(fn, path, TRIGGER_ROOTS))) }),
    ...(draft.attributes === undefined
      ? {}
      : {
          attributes: Object.fromEntries(
            Object.entries(draft.attributes).map(([name, a]) => [
              name,
              { ...(a.type === undefined ? {} : { type: a.type }), ...(a.value === undefined ? {} : { value: expr(a.value, `attributes.${name}`, STEP_ROOTS) }) },
            ]),
          ),
        }),
    ...(draft.sla === undefined ? {} : { sla: draft.sla }),
    ...((draft.schedules ?? []).length === 0 ? {} : { schedules: draft.schedules.map((s) => ({ ...s })) }),
    ...(draft.concurrency === undefined
      ? {}
      : { concurrency: { key: expr(draft.concurrency.key, 'concurrency.key', STEP_ROOTS), limit: draft.concurrency.limit } }),
  };
}

/** A trigger with its mappings translated: a start trigger's input, or a message trigger's match value and payload. */
function lowerTrigger(t: DraftTrigger, at: string, expr: (fn: unknown, path: string) => string): Record<string, unknown> {
  if (!('message' in t)) return { event: t.event, input: expr(t.input, `${at}.input`) };
  const match =
    'correlationId' in t.match
      ? { correlationId: expr(t.match.correlationId, `${at}.match.correlationId`) }
      : { attribute: t.match.attribute, value: expr(t.match.value, `${at}.match.value`) };
  return { event: t.event, message: t.message, match, ...(t.payload === undefined ? {} : { payload: expr(t.payload, `${at}.payload`) }) };
}
