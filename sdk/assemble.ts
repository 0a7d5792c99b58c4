import type { z } from 'zod';
import type { StepKind } from '../contracts/logic-version.ts';
import type { DraftExpr, DraftModule, DraftStep, WorkflowDraft } from './draft.ts';
import { FlowSdkError, SdkErrorCode } from './errors.ts';
import { toJsonSchema } from './json-schema.ts';

/** The builder's frozen state; every builder method copies it. */
export interface BuilderState {
  readonly meta: { logicId: string; version: number; domain: string; description?: string; priority?: number; input: z.core.$ZodType };
  readonly steps: readonly { name: string; kind: StepKind; options: Record<string, unknown> }[];
  readonly modules: readonly { name: string; options: Record<string, unknown> }[];
  readonly triggers: readonly { event: string; options: Record<string, unknown> }[];
  readonly output?: DraftExpr;
}

/** The LogicVersion fields each kind carries besides the common ones, in contract order. */
const KIND_FIELDS: Record<StepKind, readonly string[]> = {
  proxy: ['handler', 'method', 'path', 'throttleBudgetMs'],
  http: ['method', 'url', 'headers', 'throttleBudgetMs'],
  decision: ['options', 'schema', 'approverScope', 'deadline', 'onTimeout'],
  delay: ['duration', 'until'],
  func: ['module', 'export'],
  children: ['logicId', 'version', 'items', 'itemInput', 'failurePolicy'],
  emit: ['event', 'payload'],
  pass: [],
  choice: ['branches', 'otherwise'],
  fail: ['code', 'message'],
};
const COMMON_FIELDS = ['input', 'onError', 'retry', 'timeoutMs', 'compensate', 'output'] as const;
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
    ...(state.meta.priority === undefined ? {} : { priority: state.meta.priority }),
    input: toJsonSchema(state.meta.input, `${at} input`),
    start: first.name,
    steps,
    ...(state.output === undefined ? {} : { output: state.output }),
    modules,
    triggers: state.triggers.map((t) => ({ event: t.event, input: t.options['input'] as DraftExpr })),
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
  if (field === 'compensate' || field === 'retry' || field === 'headers') return { ...(value as object) };
  return value;
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
