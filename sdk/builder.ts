import type { AddStep, DecisionResult, Mapping, NewStepName, StepContext } from './context.ts';
import type { WorkflowDraft } from './draft.ts';
import type {
  ChildrenOptions,
  ChoiceOptions,
  DecisionOptions,
  DelayOptions,
  EmitOptions,
  FailOptions,
  FuncOptions,
  HttpOptions,
  Json,
  ModuleOptions,
  PassOptions,
  ProxyOptions,
  Schema,
  ScheduleOptions,
  TriggerOptions,
  MessageTriggerOptions,
  UnknownSchema,
  WaitForOptions,
} from './options.ts';

/** Brand of a workflow builder, so the compiler finds definitions among a module's exports. */
export const WORKFLOW_BRAND: unique symbol = Symbol.for('sentin8.flow.workflow') as never;

type Ctx<In, S, D> = StepContext<In, S, D>;
/** The context of a step's compensation: its own output may be missing (the step may have failed). */
type CompCtx<In, S, D, N extends string, O> = StepContext<In, S & { readonly [K in N]?: O }, D>;

/**
 * An immutable workflow definition under construction: every method returns a new builder.
 *
 * Type parameters carry what later steps may read: `In` the workflow input, `S` the outputs of the
 * steps declared so far, `D` the decision visible to the next step, `M` the declared modules and
 * `Out` the workflow output.
 */
export interface WorkflowBuilder<In, S, D, M extends string, Out> {
  readonly [WORKFLOW_BRAND]: true;
  readonly logicId: string;
  readonly version: number;
  /** Phantom field: the builder's types, for `WorkflowInput<W>` and friends. Never set at run time. */
  readonly '~types'?: { readonly input: In; readonly steps: S; readonly output: Out };

  /** Calls the owning service (proxy-back): POST the input to the handler's base URL + `path`. */
  proxy<const N extends string, O extends Schema = UnknownSchema>(
    name: NewStepName<N, S>,
    options: ProxyOptions<Ctx<In, S, D>, CompCtx<In, S, D, N, Json<O>>, M, O>,
  ): WorkflowBuilder<In, AddStep<S, N, Json<O>>, undefined, M, Out>;

  /** Calls an allowlisted URL with the built-in HTTP executor. */
  http<const N extends string, O extends Schema = UnknownSchema>(
    name: NewStepName<N, S>,
    options: HttpOptions<Ctx<In, S, D>, CompCtx<In, S, D, N, Json<O>>, M, O>,
  ): WorkflowBuilder<In, AddStep<S, N, Json<O>>, undefined, M, Out>;

  /** Parks until an approver answers with one of `options` (and a payload matching `schema`). */
  decision<const N extends string, const Option extends string, P extends Schema = UnknownSchema>(
    name: NewStepName<N, S>,
    options: DecisionOptions<Ctx<In, S, D>, Option, P>,
  ): WorkflowBuilder<In, AddStep<S, N, DecisionResult<Option, Json<P>>>, DecisionResult<Option, Json<P>>, M, Out>;

  /** Parks until the message `message` is delivered (or takes the oldest one already buffered); its payload is the output. */
  waitFor<const N extends string, P extends Schema = UnknownSchema>(
    name: NewStepName<N, S>,
    options: WaitForOptions<Ctx<In, S, D>, P>,
  ): WorkflowBuilder<In, AddStep<S, N, Json<P>>, undefined, M, Out>;

  /** Parks for a duration or until a timestamp. */
  delay<const N extends string>(
    name: NewStepName<N, S>,
    options: DelayOptions<Ctx<In, S, D>>,
  ): WorkflowBuilder<In, AddStep<S, N, unknown>, undefined, M, Out>;

  /** Runs an export of a WASM step module declared with `.module()`. */
  func<const N extends string, O extends Schema = UnknownSchema>(
    name: NewStepName<N, S>,
    options: FuncOptions<Ctx<In, S, D>, CompCtx<In, S, D, N, Json<O>>, M, O>,
  ): WorkflowBuilder<In, AddStep<S, N, Json<O>>, undefined, M, Out>;

  /** Fans out one child workflow per element of `items`; the output is the array of child outputs. */
  children<const N extends string, Item, O extends Schema = UnknownSchema>(
    name: NewStepName<N, S>,
    options: ChildrenOptions<In, S, D, Item, O>,
  ): WorkflowBuilder<In, AddStep<S, N, Json<O>[]>, undefined, M, Out>;

  /** Writes an event to the outbox in the step's transaction. */
  emit<const N extends string>(
    name: NewStepName<N, S>,
    options: EmitOptions<Ctx<In, S, D>>,
  ): WorkflowBuilder<In, AddStep<S, N, unknown>, undefined, M, Out>;

  /** Outputs its evaluated input; no side effect. */
  pass<const N extends string, R = In>(
    name: NewStepName<N, S>,
    options?: PassOptions<Ctx<In, S, D>, R>,
  ): WorkflowBuilder<In, AddStep<S, N, R>, undefined, M, Out>;

  /** Routes to the first branch whose `when` holds, else to `otherwise`. */
  choice<const N extends string>(
    name: NewStepName<N, S>,
    options: ChoiceOptions<Ctx<In, S, D>>,
  ): WorkflowBuilder<In, AddStep<S, N, undefined>, D, M, Out>;

  /** Ends the workflow as failed (after compensation) with `code`. */
  fail<const N extends string>(
    name: NewStepName<N, S>,
    options: FailOptions,
  ): WorkflowBuilder<In, AddStep<S, N, never>, undefined, M, Out>;

  /** Declares a WASM step module that `func` steps (and compensations) may run. */
  module<const Name extends string>(
    name: Name,
    options: ModuleOptions,
  ): WorkflowBuilder<In, S, D, M | Name, Out>;

  /** Starts this workflow when `event` is published; `input` builds the workflow input from it. */
  trigger<P extends Schema = UnknownSchema>(event: string, options: TriggerOptions<P, In>): WorkflowBuilder<In, S, D, M, Out>;
  /**
   * Delivers each `event` as message `message` to the live instances of this version that `match`
   * selects, by correlationId or search attribute, instead of starting one (docs/messages.md).
   * @example .trigger('ledger.funds_settled', { message: 'funds.settled', match: { correlationId: ({ event }) => event.payload.paymentId } })
   */
  trigger<P extends Schema = UnknownSchema>(event: string, options: MessageTriggerOptions<P>): WorkflowBuilder<In, S, D, M, Out>;

  /**
   * Starts this workflow at each tick of a cron pattern (five fields, or six with seconds), read
   * in `timezone`. A local time skipped by a daylight-saving change runs once at the next valid
   * instant; one repeated by it runs once. The pattern and zone are checked here.
   * @example .schedule('0 6 1 * *', { timezone: 'Europe/Berlin', input: { accountId: 'acct-1' } })
   */
  schedule(cron: string, options?: ScheduleOptions<In>): WorkflowBuilder<In, S, D, M, Out>;

  /** The workflow's output. (Default: the output of the last step that ran) */
  output<R>(mapping: Mapping<Ctx<In, S, undefined>, R>): WorkflowBuilder<In, S, D, M, R>;

  /** The definition as plain data (mappings still functions); what the compiler reads. */
  definition(): WorkflowDraft;
}

/** Any workflow builder, whatever its types. */
// biome-ignore lint/suspicious/noExplicitAny: a builder's type parameters are invariant, so only `any` matches them all
export type AnyWorkflow = WorkflowBuilder<any, any, any, any, any>;

/** The input type of a workflow. */
export type WorkflowInput<W extends AnyWorkflow> = NonNullable<W['~types']>['input'];
/** The output type of a workflow (declared with `.output()`). */
export type WorkflowOutput<W extends AnyWorkflow> = NonNullable<W['~types']>['output'];
/** The step outputs a workflow's mappings can read. */
export type WorkflowSteps<W extends AnyWorkflow> = NonNullable<W['~types']>['steps'];
