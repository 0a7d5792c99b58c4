import type { z } from 'zod';
import { LOGIC_ID_PATTERN, STEP_NAME_PATTERN, type StepKind } from '../contracts/logic-version.ts';
import { WORKFLOW_BRAND, type WorkflowBuilder } from './builder.ts';
import { assembleDraft, type BuilderState } from './assemble.ts';
import { FlowSdkError, SdkErrorCode } from './errors.ts';
import type { StepContext } from './context.ts';
import type { AttributeOption, ConcurrencyOptions, Json, Schema, SlaOptions } from './options.ts';
import { checkedSchedule } from './schedule.ts';

/** The step map of a workflow without steps: no key may be read. */
// biome-ignore lint/complexity/noBannedTypes: `{}` is the identity of the intersections that accumulate step outputs
export type NoSteps = {};

/** What identifies and types a workflow. */
export interface WorkflowOptions<InSchema extends Schema> {
  /** Stable id, `^[a-z][a-z0-9_.-]{0,127}$`. @example "payments.capture" */
  logicId: string;
  /** Integer ≥ 1; bump it for any change once published (the compiler's version gate checks). */
  version: number;
  /** The owning service: the default proxy-back handler. @example "payments" */
  domain: string;
  /** (Default: none) */
  description?: string;
  /**
   * Claims take an env's instances of higher priority first (-1000 to 1000); a start request may
   * set its own. (Default: 0)
   */
  priority?: number;
  /** Schema of the workflow input; instances are validated against its JSON Schema form. */
  input: InSchema;
  /**
   * How many days an ended instance is kept before retention removes it with all its rows,
   * overriding the env's FLOW_RETENTION_DAYS. (Default: the env's retention)
   * @example { days: 400 }
   */
  retention?: { days: number };
  /**
   * Search attributes, set when an instance starts, filterable as `?attr.<name>=` (docs/search-attributes.md).
   * (Default: none) @example { accountId: ({ input }) => input.accountId }
   */
  attributes?: Readonly<Record<string, AttributeOption<StepContext<Json<InSchema>, NoSteps>>>>;
  /** How long an instance may take from its start, whatever it waits for. (Default: none) */
  sla?: SlaOptions;
  /**
   * At most `limit` instances not ended at once per value of `key`; the others wait to begin,
   * woken in order as one ends. (Default: none)
   * @example { key: ({ input }) => input.accountId, limit: 1 }
   */
  concurrency?: ConcurrencyOptions<{ input: Json<InSchema> }>;
}

/**
 * Starts a workflow definition.
 * @example
 * export const capture = workflow({ logicId: 'payments.capture', version: 1, domain: 'payments', input })
 *   .proxy('reserve', { path: '/funds/reserve', input: ({ input }) => ({ cents: input.amount * 100 }) });
 */
export function workflow<InSchema extends Schema>(
  options: WorkflowOptions<InSchema>,
): WorkflowBuilder<Json<InSchema>, NoSteps, undefined, never, unknown> {
  if (!LOGIC_ID_PATTERN.test(options.logicId)) {
    throw new FlowSdkError(SdkErrorCode.invalidName, `logicId "${options.logicId}" must match ${LOGIC_ID_PATTERN}`);
  }
  if (!Number.isInteger(options.version) || options.version < 1) {
    throw new FlowSdkError(SdkErrorCode.invalidOption, `${options.logicId}: version must be an integer >= 1`);
  }
  if (options.priority !== undefined && !(Number.isInteger(options.priority) && Math.abs(options.priority) <= 1000)) {
    throw new FlowSdkError(SdkErrorCode.invalidOption, `${options.logicId}: priority must be an integer from -1000 to 1000`);
  }
  const state: BuilderState = {
    meta: { ...options, input: options.input as z.core.$ZodType },
    steps: [],
    modules: [],
    triggers: [],
    schedules: [],
  };
  return makeBuilder(state) as never;
}

type Loose = WorkflowBuilder<unknown, Record<string, unknown>, unknown, string, unknown>;

function makeBuilder(state: BuilderState): Loose {
  const addStep = (kind: StepKind) => (name: string, options: object | undefined) => {
    if (!STEP_NAME_PATTERN.test(name)) {
      throw new FlowSdkError(SdkErrorCode.invalidName, `${label(state)}: step name "${name}" must match ${STEP_NAME_PATTERN}`);
    }
    if (state.steps.some((s) => s.name === name)) {
      throw new FlowSdkError(SdkErrorCode.duplicateStep, `${label(state)}: step "${name}" is declared twice`);
    }
    return makeBuilder({ ...state, steps: [...state.steps, Object.freeze({ name, kind, options: { ...options } })] });
  };
  const builder = {
    [WORKFLOW_BRAND]: true as const,
    logicId: state.meta.logicId,
    version: state.meta.version,
    proxy: addStep('proxy'),
    http: addStep('http'),
    decision: addStep('decision'),
    waitFor: addStep('waitFor'),
    delay: addStep('delay'),
    func: addStep('func'),
    children: addStep('children'),
    emit: addStep('emit'),
    pass: addStep('pass'),
    choice: addStep('choice'),
    fail: addStep('fail'),
    module: (name: string, options: object) =>
      makeBuilder({ ...state, modules: [...state.modules, Object.freeze({ name, options: { ...options } })] }),
    trigger: (event: string, options: object) =>
      makeBuilder({ ...state, triggers: [...state.triggers, Object.freeze({ event, options: { ...options } })] }),
    schedule: (cron: string, options: Record<string, unknown> = {}) =>
      makeBuilder({ ...state, schedules: [...state.schedules, checkedSchedule(state, cron, options)] }),
    output: (mapping: (ctx: never) => unknown) => makeBuilder({ ...state, output: mapping }),
    definition: () => assembleDraft(state),
  };
  return Object.freeze(builder) as unknown as Loose;
}

function label(state: BuilderState): string {
  return `${state.meta.logicId}@${state.meta.version}`;
}
