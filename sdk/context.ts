/**
 * The types an author's mapping functions see. They mirror the JSONata evaluation context of
 * ARCHITECTURE.md, Contracts: LogicVersion: `{ input, steps, workflow, decision, item, index }`.
 */

/** The running instance, as exposed to expressions under `workflow`. */
export interface WorkflowInfo {
  readonly id: string;
  readonly env: string;
  readonly logicId: string;
  readonly version: number;
  readonly correlationId: string | null;
}

/** What a decision step resumes with, visible as `decision` on the step right after it. */
export interface DecisionResult<Option extends string = string, Payload = unknown> {
  readonly option: Option;
  readonly payload: Payload;
}

/**
 * The context of a step's mappings. `steps` holds the output of every step declared earlier;
 * a step skipped by a choice evaluates to `undefined` there at run time.
 */
export interface StepContext<In, Steps, Decision = undefined> {
  readonly input: In;
  readonly steps: Steps;
  readonly workflow: WorkflowInfo;
  /** Set only on the step declared right after a decision step. */
  readonly decision: Decision;
}

/** The context of a children step's `itemInput`: one element of `items` and its position. */
export interface ItemContext<In, Steps, Decision, Item> extends StepContext<In, Steps, Decision> {
  readonly item: Item;
  readonly index: number;
}

/** The context of a trigger's `input` mapping: the event that starts the workflow. */
export interface TriggerContext<Payload> {
  readonly event: {
    /** The event name. @example "account.opened" */
    readonly type: string;
    readonly payload: Payload;
    /** The publisher's key: one instance per (event, workflow). */
    readonly idempotencyKey: string;
  };
}

/**
 * A data mapping written as an inline arrow function. The compiler translates its body to JSONata
 * (see docs/sdk.md for the supported subset); it never runs in the engine.
 * @example ({ input, steps }) => ({ id: steps.reserve.reservationId, cents: input.amount * 100 })
 */
export type Mapping<Ctx, R = unknown> = (ctx: Ctx) => R;

/** Flattens an intersection so that editor hovers show one object type. */
export type Simplify<T> = { [K in keyof T]: T[K] } & {};

/** The step map after adding step `N` with output `O`. */
export type AddStep<Steps, N extends string, O> = Simplify<Steps & { readonly [K in N]: O }>;

/** Resolves to `N` when the name is new, and to `never` (a type error at the call) when taken. */
export type NewStepName<N extends string, Steps> = N extends keyof Steps ? never : N;
