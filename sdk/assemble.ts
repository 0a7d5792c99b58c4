import type { z } from 'zod';
import { ATTRIBUTE_NAME_PATTERN, type StepKind } from '../contracts/logic-version.ts';
import type { DraftExpr, DraftModule, DraftSchedule, DraftStep, DraftTrigger, WorkflowDraft } from './draft.ts';
import { FlowSdkError, SdkErrorCode } from './errors.ts';
import { toJsonSchema } from './json-schema.ts';

/** The builder's frozen state; every builder method copies it. */
export interface BuilderState {
  readonly meta: {
    logicId: string;
    version: number;
    domain: string;
    description?: string;
    input: z.core.$ZodType;
    attributes?: Readonly<Record<string, unknown>>;
    sla?: { within: string };
    retention?: { days: number };
    concurrency?: { key: unknown; limit: number };
    priority?: number;
  };
  readonly steps: readonly { name: string; kind: StepKind; options: Record<string, unknown> }[];
  readonly modules: readonly { name: string; options: Record<string, unknown> }[];
  readonly triggers: readonly { event: string; options: Record<string, unknown> }[];
  readonly schedules: readonly DraftSchedule[];
  readonly output?: DraftExpr;
}

/** The LogicVersion fields each kind carries besides the common ones, in contract order. */
const KIND_FIELDS: Record<StepKind, readonly string[]> = {
  proxy: ['handler', 'method', 'path', 'attributes', 'concurrency', 'throttleBudgetMs'],
  http: ['method', 'url', 'headers', 'attributes', 'concurrency', 'throttleBudgetMs'],
  decision: ['options', 'schema', 'approverScope', 'deadline', 'onTimeout'],
  waitFor: ['message', 'schema', 'timeout'],
  delay: ['duration', 'until'],
  func: ['module', 'export', 'attributes', 'concurrency'],
  children: ['logicId', 'version', 'items', 'itemInput', 'failurePolicy'],
  emit: ['event', 'payload'],
  pass: [],
  choice: ['branches', 'otherwise'],
  fail: ['code', 'message'],
};
const COMMON_FIELDS = ['input', 'onError', 'retry', 'timeoutMs', 'compensate', 'output', 'sla'] as const;
/** Kinds that never continue to a next step. */
const NO_NEXT: ReadonlySet<StepKind> = new Set(['choice', 'fail']);

export function assembleDraft(state: BuilderState): WorkflowDraft {
  const at = `${state.meta.logicId}@${state.meta.version}`;
  const first = state.steps[0];
  if (first === undefined) throw new FlowSdkError(SdkErrorCode.noSteps, `${at}: a workflow needs at least one step`);
  const steps = state.steps.map((entry, i) => {
    const step: Record<string, unknown> = { kind: entry.kind };
    for (const field of [...COMMON_FIELDS, ...KIND_FIELDS[entry.kind]]) {
      const value = entry.options[field];
      if (value !== undefined) step[field] = convert(field, value, `${at} step "${entry.name}"`, entry.kind);
    }
    if (entry.kind === 'children') step['failurePolicy'] ??= 'fail_fast';
    if (!NO_NEXT.has(entry.kind)) {
      const following = state.steps[i + 1];
      const next = 'next' in entry.options ? entry.options['next'] : following?.name;
      if (typeof next === 'string') step['next'] = next;
      if (following?.kind === 'fail' && !('next' in entry.options)) {
        throw new FlowSdkError(
          SdkErrorCode.fallthroughIntoFail,
          `${at}: step "${entry.name}" would fall through into fail step "${following.name}"; ` +
            `set next: "${following.name}" to mean it, or next: null to end the workflow`,
        );
      }
    }
    return { name: entry.name, step: step as unknown as DraftStep };
  });
  const modules: DraftModule[] = state.modules.map((m) => moduleDraft(at, m.name, m.options));
  const draft: WorkflowDraft = {
    logicId: state.meta.logicId,
    version: state.meta.version,
    domain: state.meta.domain,
    ...(state.meta.description === undefined ? {} : { description: state.meta.description }),
    ...(state.meta.retention === undefined ? {} : { retention: { days: state.meta.retention.days } }),
    ...(state.meta.priority === undefined ? {} : { priority: state.meta.priority }),
    input: toJsonSchema(state.meta.input, `${at} input`),
    start: first.name,
    steps,
    ...(state.output === undefined ? {} : { output: state.output }),
    modules,
    triggers: state.triggers.map((t) => triggerDraft(at, t.event, t.options, steps)),
    ...(state.meta.attributes === undefined ? {} : { attributes: attributesDraft(at, state.meta.attributes) }),
    ...(state.meta.sla === undefined ? {} : { sla: { within: state.meta.sla.within } }),
    schedules: state.schedules,
    ...(state.meta.concurrency === undefined ? {} : { concurrency: concurrencyOf(state.meta.concurrency, at) }),
  };
  checkReferences(at, draft);
  return draft;
}

function convert(field: string, value: unknown, where: string, kind: StepKind): unknown {
  // A children step's output is the array of its children's outputs; authors declare one element.
  if ((field === 'output' || field === 'schema') && isZod(value)) {
    return toJsonSchema(value, `${where} ${field}`, { array: kind === 'children' && field === 'output' });
  }
  if (field === 'branches') return (value as { when: unknown; next: string }[]).map((b) => ({ when: b.when, next: b.next }));
  if (field === 'options') return [...(value as string[])];
  if (field === 'concurrency') return concurrencyOf(value, where);
  if (field === 'compensate' || field === 'retry' || field === 'headers' || field === 'attributes') return { ...(value as object) };
  if (field === 'sla') return { within: (value as { within: string }).within };
  return value;
}

/** A bare mapping leaves the type to each value; `{ type, value? }` declares it. */
function attributesDraft(at: string, attributes: Readonly<Record<string, unknown>>): NonNullable<WorkflowDraft['attributes']> {
  const out: Record<string, { type?: 'string' | 'number' | 'time'; value?: DraftExpr }> = {};
  for (const [name, option] of Object.entries(attributes)) {
    if (!ATTRIBUTE_NAME_PATTERN.test(name)) {
      throw new FlowSdkError(SdkErrorCode.invalidName, `${at}: attribute name "${name}" must match ${ATTRIBUTE_NAME_PATTERN}`);
    }
    if (typeof option === 'function') out[name] = { value: option as DraftExpr };
    else {
      const o = option as { type?: 'string' | 'number' | 'time'; value?: DraftExpr };
      out[name] = { ...(o.type === undefined ? {} : { type: o.type }), ...(o.value === undefined ? {} : { value: o.value }) };
    }
  }
  return out;
}

/** A concurrency option checked: a key mapping and a whole limit ≥ 1. */
function concurrencyOf(value: unknown, where: string): { key: DraftExpr; limit: number } {
  const c = value as { key?: unknown; limit?: unknown };
  if (typeof c.key !== 'function' || typeof c.limit !== 'number' || !Number.isInteger(c.limit) || c.limit < 1) {
    throw new FlowSdkError(SdkErrorCode.invalidOption, `${where}: concurrency needs a key mapping and a whole limit >= 1`);
  }
  return { key: c.key as DraftExpr, limit: c.limit };
}

function isZod(value: unknown): value is z.core.$ZodType {
  return typeof value === 'object' && value !== null && '_zod' in value;
}

function moduleDraft(at: string, name: string, options: Record<string, unknown>): DraftModule {
  const imports = { ...((options['imports'] as DraftModule['imports'] | undefined) ?? {}) };
  if (typeof options['wasm'] === 'string') return { name, source: { kind: 'wasm', path: options['wasm'] }, imports };
  if (typeof options['assemblyScript'] === 'string') {
    const pages = options['maximumMemoryPages'] as number | undefined;
    const source = { kind: 'assemblyscript' as const, entry: options['assemblyScript'] };
    return { name, source: pages === undefined ? source : { ...source, maximumMemoryPages: pages }, imports };
  }
  throw new FlowSdkError(SdkErrorCode.invalidOption, `${at}: module "${name}" needs wasm or assemblyScript`);
}

/** Routes, modules and per-kind rules the types cannot enforce (names declared later are allowed). */
function checkReferences(at: string, draft: WorkflowDraft): void {
  const names = new Set(draft.steps.map((s) => s.name));
  const modules = new Set(draft.modules.map((m) => m.name));
  const fail = (code: (typeof SdkErrorCode)[keyof typeof SdkErrorCode], msg: string): never => {
    throw new FlowSdkError(code, `${at}: ${msg}`);
  };
  for (const { name, step } of draft.steps) {
    const s = step as Record<string, unknown>;
    const targets = [s['next'], s['onError'], s['onTimeout'], s['otherwise']];
    for (const b of (s['branches'] as { next: unknown }[] | undefined) ?? []) targets.push(b.next);
    for (const t of targets) {
      if (typeof t === 'string' && !names.has(t)) {
        fail(SdkErrorCode.unknownStep, `step "${name}" routes to "${t}", which is not a step (steps: ${[...names].join(', ')})`);
      }
    }
    const comp = s['compensate'] as { kind?: string; module?: string } | undefined;
    for (const m of [step.kind === 'func' ? s['module'] : undefined, comp?.kind === 'func' ? comp.module : undefined]) {
      if (typeof m === 'string' && !modules.has(m)) fail(SdkErrorCode.unknownModule, `step "${name}" uses module "${m}", not declared with .module()`);
    }
    if (step.kind === 'delay' && (s['duration'] === undefined) === (s['until'] === undefined)) {
      fail(SdkErrorCode.invalidOption, `delay step "${name}" needs exactly one of duration or until`);
    }
    for (const url of [step.kind === 'http' ? s['url'] : undefined, comp?.kind === 'http' ? (comp as { url?: unknown }).url : undefined]) {
      if (typeof url === 'string' && !/^https?:\/\//.test(url)) {
        fail(SdkErrorCode.invalidOption, `step "${name}": a literal url must start with http:// or https:// (or use a mapping)`);
      }
    }
  }
}

/**
 * A trigger's draft: a start trigger's `input`, or a message trigger's `match` and
 * `messagePayload` (the LogicVersion's `payload`), whose message a waitFor step must take.
 */
function triggerDraft(at: string, event: string, options: Record<string, unknown>, steps: WorkflowDraft['steps']): DraftTrigger {
  if (!('message' in options)) return { event, input: options['input'] as DraftExpr };
  const fail = (msg: string): never => {
    throw new FlowSdkError(SdkErrorCode.invalidOption, `${at}: the trigger on ${event} ${msg}`);
  };
  const message = options['message'];
  if (typeof message !== 'string') return fail('needs message, the name a waitFor step waits for');
  if (!steps.some(({ step }) => step.kind === 'waitFor' && (step as { message?: unknown }).message === message)) {
    fail(`delivers message "${message}", which no waitFor step waits for`);
  }
  const match = options['match'] as Record<string, unknown> | undefined;
  const isFn = (v: unknown) => typeof v === 'function';
  let drafted: Extract<DraftTrigger, { message: string }>['match'];
  if (match !== undefined && isFn(match['correlationId'])) drafted = { correlationId: match['correlationId'] as DraftExpr };
  else if (match !== undefined && typeof match['attribute'] === 'string' && isFn(match['value'])) {
    drafted = { attribute: match['attribute'], value: match['value'] as DraftExpr };
  } else return fail('needs match: { correlationId: mapping } or { attribute: name, value: mapping }');
  const payload = options['messagePayload'];
  return { event, message, match: drafted, ...(payload === undefined ? {} : { payload: payload as DraftExpr }) };
}
