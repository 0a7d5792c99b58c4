import type { z } from 'zod';
import type { RetryPolicy, Target } from '../contracts/logic-version.ts';
import type { ItemContext, Mapping, StepContext, TriggerContext } from './context.ts';

/**
 * Any zod schema. The core type, not `z.ZodType`: checking a schema against the classic class is
 * structural and costs the type checker about a second per call site; the core type is cheap.
 */
export type Schema = z.core.$ZodType;
/** The schema assumed when a step declares none: its output is `unknown`. */
export type UnknownSchema = z.core.$ZodType<unknown, unknown>;
/** The JSON a schema accepts: what the engine stores (zod defaults and transforms do not run there). */
export type Json<S extends Schema> = z.input<S>;
export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/**
 * Retry policy for transient failures (408, 429, 5xx, network errors, timeouts).
 * Every field is optional: `maxAttempts` (Default: 3), `initialMs` (Default: 200), `factor`
 * (Default: 2), `maxMs` (Default: 30000).
 */
export type RetryOptions = RetryPolicy;

/**
 * A service level: the instance, or a step from when it is first reached, should be done within
 * `within`. Waiting, parked and retrying time all count; an overrun is recorded once as a breach
 * (docs/sla.md). @example { within: 'PT2H' }
 */
export interface SlaOptions {
  /** ISO 8601 duration. @example "PT2H" */
  within: string;
}

/**
 * A search attribute's value: a string, a number, or an ISO 8601 instant (a string);
 * null or undefined leaves it unset.
 */
export type AttributeValue = string | number | null | undefined;

/**
 * A search attribute of the workflow: a mapping (its type then follows each value: a number is a
 * number, an ISO 8601 instant is a time, any other string is a string), or `{ type, value? }` to
 * declare the type (a value of another type fails the step that set it). Without `value`, only
 * steps set it.
 * @example ({ input }) => input.accountId
 * @example { type: 'time', value: ({ input }) => input.dueAt }
 */
export type AttributeOption<Ctx> = Mapping<Ctx, AttributeValue> | { type: 'string' | 'number' | 'time'; value?: Mapping<Ctx, AttributeValue> };

/** Options every step kind accepts. */
export interface RoutingOptions {
  /**
   * The step to run next; `null` ends the workflow here.
   * (Default: the step declared right after this one, or the end for the last step)
   */
  next?: string | null;
  /** The step to route to when this step fails for good, instead of compensating. (Default: none) */
  onError?: string;
  /** Retry policy for transient failures. (Default: 3 attempts, 200 ms doubling up to 30 s) */
  retry?: RetryOptions;
  /** Time limit of one attempt in milliseconds. (Default: the engine's limit for the kind) */
  timeoutMs?: number;
  /** How long the step may take from when it is first reached, retries and waits included. (Default: none) */
  sla?: SlaOptions;
}

/** Options of steps that take an input. */
export interface InputOptions<Ctx> extends RoutingOptions {
  /** The step's input, mapped from the context. (Default: the workflow input) */
  input?: Mapping<Ctx>;
}

/** A compensation: the side effect that undoes a step; registered before the step runs. */
export type Compensation<Ctx, Mods extends string> =
  | {
      kind: 'proxy';
      /** Path on the handler's base URL, starting with `/`. */
      path: string;
      /** (Default: POST) */
      method?: HttpMethod;
      /** Handler profile name. (Default: the workflow's domain) */
      handler?: string;
      /** Request body. (Default: the workflow input) */
      input?: Mapping<Ctx>;
      /** (Default: the step retry defaults) */
      retry?: RetryOptions;
    }
  | {
      kind: 'http';
      method: HttpMethod;
      /** A literal `https://…` URL or a mapping that returns one. */
      url: string | Mapping<Ctx, string>;
      headers?: Readonly<Record<string, string>>;
      input?: Mapping<Ctx>;
      retry?: RetryOptions;
    }
  | {
      kind: 'func';
      /** A module declared with `.module()`. */
      module: Mods;
      /** (Default: "run") */
      export?: string;
      input?: Mapping<Ctx>;
      retry?: RetryOptions;
    };

/**
 * A per-key concurrency limit: at most `limit` at once per value of `key` — of a step's calls in
 * flight, or (on the workflow) of its instances not ended. Work beyond it waits, without using an
 * attempt, and is woken when one finishes. The limit can be changed at runtime through the API.
 * @example { key: ({ input }) => input.accountId, limit: 1 }
 */
export interface ConcurrencyOptions<Ctx> {
  /** The key, mapped from the context; instances with equal keys share the limit. */
  key: Mapping<Ctx, string | number>;
  /** How many at once per key (≥ 1). */
  limit: number;
}

/** Options of steps with side effects, which may register a compensation. */
export interface SideEffectOptions<Ctx, CompCtx, Mods extends string, Out extends Schema> extends InputOptions<Ctx> {
  /** At most `limit` of this step's calls in flight per key. (Default: none) */
  concurrency?: ConcurrencyOptions<Ctx>;
  /** Undoes this step when the workflow fails or is cancelled with compensation. (Default: none) */
  compensate?: Compensation<CompCtx, Mods>;
  /** Schema of the step's output: types `steps.<name>` for later steps. (Default: unknown) */
  output?: Out;
  /**
   * Search attributes set when the step succeeds, from the context and `output`, its own output.
   * (Default: none) @example { settledAt: ({ output }) => output.at }
   */
  attributes?: Readonly<Record<string, Mapping<Ctx & { readonly output: Json<Out> }, AttributeValue>>>;
}

export interface ProxyOptions<Ctx, CompCtx, Mods extends string, Out extends Schema>
  extends SideEffectOptions<Ctx, CompCtx, Mods, Out> {
  /** Path on the handler's base URL, starting with `/`. @example "/funds/reserve" */
  path: string;
  /** (Default: POST) */
  method?: HttpMethod;
  /** Handler profile name. (Default: the workflow's domain) */
  handler?: string;
  /**
   * How long in all the service's 429 and 503 answers may hold this step without using an
   * attempt, in ms; past it they count as failed attempts. (Default: the engine's FLOW_THROTTLE_BUDGET_MS)
   */
  throttleBudgetMs?: number;
}

export interface HttpOptions<Ctx, CompCtx, Mods extends string, Out extends Schema>
  extends SideEffectOptions<Ctx, CompCtx, Mods, Out> {
  method: HttpMethod;
  /** A literal `http(s)://` URL, or a mapping returning one. The host must be on the engine's allowlist. */
  url: string | Mapping<Ctx, string>;
  /** (Default: none) */
  headers?: Readonly<Record<string, string>>;
  /** As a proxy step's `throttleBudgetMs`. (Default: the engine's FLOW_THROTTLE_BUDGET_MS) */
  throttleBudgetMs?: number;
}

export interface FuncOptions<Ctx, CompCtx, Mods extends string, Out extends Schema>
  extends SideEffectOptions<Ctx, CompCtx, Mods, Out> {
  /** A module declared with `.module()` before this step. */
  module: Mods;
  /** The module export to call. (Default: "run") */
  export?: string;
}

export interface DecisionOptions<Ctx, Option extends string, Payload extends Schema> extends InputOptions<Ctx> {
  /** The answers an approver can give. @example ["approve", "reject"] */
  options: readonly [Option, ...Option[]];
  /** Schema of the payload the approver sends with the option. (Default: any JSON) */
  schema?: Payload;
  /** Scope the approver must hold. (Default: the engine's decision scope) */
  approverScope?: string;
  /** ISO 8601 duration after which the decision times out. (Default: none — waits forever) */
  deadline?: string;
  /** The step to route to when the deadline passes. (Default: fail the workflow) */
  onTimeout?: string;
}

/** A waitFor step parks until a message named `message` is delivered to the instance. */
export interface WaitForOptions<Ctx, Payload extends Schema> extends InputOptions<Ctx> {
  /** The message's name, as delivered to `POST …/workflows/{id}/messages/{name}`. @example "funds.settled" */
  message: string;
  /** Schema of the message's payload, enforced at delivery; the payload is the step's output. (Default: any JSON) */
  schema?: Payload;
  /** ISO 8601 duration to wait; then the step fails FLOW_MESSAGE_TIMEOUT and takes `onError`. (Default: none — waits forever) */
  timeout?: string;
}

/** A delay waits for a fixed `duration` or until the timestamp `until` returns. */
export type DelayOptions<Ctx> = RoutingOptions &
  (
    | { /** ISO 8601 duration. @example "PT15M" */ duration: string; until?: never }
    | { /** Returns an ISO 8601 timestamp. */ until: Mapping<Ctx, string>; duration?: never }
  );

export interface ChildrenOptions<In, Steps, Decision, Item, Out extends Schema> extends RoutingOptions {
  /** logicId of the child workflow. */
  logicId: string;
  /** Pinned child version. (Default: the child's active version when spawned) */
  version?: number;
  /** The array to fan out over; one child per element. */
  items: Mapping<StepContext<In, Steps, Decision>, readonly Item[]>;
  /** Each child's input, mapped from one element (`item`) and its position (`index`). */
  itemInput: Mapping<ItemContext<In, Steps, Decision, Item>>;
  /** `fail_fast` fails on the first failed child; `all_settled` waits for all. (Default: "fail_fast") */
  failurePolicy?: 'fail_fast' | 'all_settled';
  /** Schema of one child's output; the step's output is the array of them. (Default: unknown) */
  output?: Out;
}

export interface EmitOptions<Ctx> extends RoutingOptions {
  /** Event name written to the outbox. @example "statement.generated" */
  event: string;
  /** The event payload. */
  payload: Mapping<Ctx>;
}

export interface PassOptions<Ctx, R> extends RoutingOptions {
  /** The step's output. (Default: the workflow input) */
  input?: Mapping<Ctx, R>;
}

export interface ChoiceOptions<Ctx> {
  /** Tried in order; the first whose `when` holds picks the next step. */
  branches: readonly { when: Mapping<Ctx, boolean>; next: string }[];
  /** The step when no branch holds. */
  otherwise: string;
}

export interface FailOptions {
  /** Stable error code recorded on the instance. @example "APPROVAL_REJECTED" */
  code: string;
  /** (Default: none) */
  message?: string;
}

/** A WASM step module: prebuilt (`wasm`) or built from AssemblyScript (`assemblyScript`). */
export type ModuleOptions = (
  | { /** Path of a prebuilt `.wasm`, relative to the definition file. */ wasm: string; assemblyScript?: never }
  | {
      /** Entry file of an AssemblyScript module, relative to the definition file. */
      assemblyScript: string;
      wasm?: never;
      /** Memory cap in 64 KiB pages. (Default: the module builder's default) */
      maximumMemoryPages?: number;
    }
) & {
  /** Host functions the module may call, each a proxy-back target. (Default: none) */
  imports?: Readonly<Record<string, Target>>;
};

export interface TriggerOptions<Payload extends Schema, In> {
  /**
   * Schema of the event payload: types `event` in the mapping, at compile time only. The engine
   * checks what the mapping builds against the workflow's `input` schema (a mismatch refuses the
   * event with FLOW_TRIGGER_INPUT_INVALID, 422), so carry into the input what must be checked.
   * (Default: unknown)
   */
  payload?: Payload;
  /** The workflow input built from the event. */
  input: Mapping<TriggerContext<Json<Payload>>, In>;
}

/** What a message trigger's match reads from the event: a correlationId or attribute value (null reaches no instance). */
export type MatchValue<Payload extends Schema> = Mapping<TriggerContext<Json<Payload>>, string | number | null>;

export interface MessageTriggerOptions<Payload extends Schema> {
  /** Schema of the event payload: types `event` in the mappings, at compile time only. (Default: unknown) */
  payload?: Payload;
  /** The message delivered: one of this workflow's `waitFor` steps must wait for it. */
  message: string;
  /**
   * Which live instances of this version the event reaches: those whose correlationId (given at
   * start), or whose search attribute `attribute`, equals the mapping's value.
   * @example { correlationId: ({ event }) => event.payload.paymentId }
   */
  match: { correlationId: MatchValue<Payload> } | { attribute: string; value: MatchValue<Payload> };
  /**
   * The message payload built from the event, checked against the `waitFor` step's schema (a
   * mismatch refuses the event with FLOW_TRIGGER_ROUTE_INVALID, 422). (Default: the event's payload)
   */
  messagePayload?: Mapping<TriggerContext<Json<Payload>>, unknown>;
}


export interface ScheduleOptions<In> {
  /**
   * Names the schedule: its id is `<logicId>:<name>`, kept across versions so a pause survives a
   * new version. (Default: its position among the workflow's schedules, from 1)
   */
  name?: string;
  /** IANA time zone the pattern is read in. @example "Europe/Berlin" (Default: "UTC") */
  timezone?: string;
  /**
   * A tick while the schedule's previous instance is still running: `skip` it, hold the latest
   * one until that instance ends (`buffer_one`), or start anyway (`allow`). (Default: "skip")
   */
  overlap?: 'skip' | 'buffer_one' | 'allow';
  /**
   * How late a tick may still start, as an ISO 8601 duration: after an outage, missed ticks
   * within it run and older ones are recorded as skipped. (Default: "PT5M")
   */
  catchUp?: string;
  /** The input of every instance it starts (JSON, checked against the input schema). (Default: `{}`) */
  input?: In;
}
