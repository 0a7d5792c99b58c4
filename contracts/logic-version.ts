import { z } from 'zod';

/**
 * LogicVersion v1 — the compiled, immutable, content-hashed workflow definition (ARCHITECTURE.md, Contracts).
 *
 * The schema never fills in defaults: the hash covers the document exactly as written, so defaults
 * (retry policy, HTTP method, export name…) are applied where they are used, from `DEFAULTS` below.
 */

export const LOGIC_VERSION_SCHEMA = 'sentin8.flow/logic-version/v1';

export const LOGIC_ID_PATTERN = /^[a-z][a-z0-9_.-]{0,127}$/;
export const STEP_NAME_PATTERN = /^[a-zA-Z][a-zA-Z0-9_-]{0,63}$/;

export const DEFAULTS = {
  retry: { maxAttempts: 3, initialMs: 200, factor: 2, maxMs: 30_000 },
  method: 'POST',
  export: 'run',
  schedule: { name: (index: number) => String(index + 1), timezone: 'UTC', overlap: 'skip', catchUp: 'PT5M' },
} as const;

/** A JSONata expression, evaluated against the step context. */
export const Expr = z.string().min(1, 'an expression cannot be empty');
export const StepName = z.string().regex(STEP_NAME_PATTERN, 'a step name matches ^[a-zA-Z][a-zA-Z0-9_-]{0,63}$');
export const LogicId = z.string().regex(LOGIC_ID_PATTERN, 'a logicId matches ^[a-z][a-z0-9_.-]{0,127}$');
/** A version number: an integer from 1 to 2^31 - 1, the range of the Postgres `integer` it is stored in. */
export const VersionNumber = z.int().min(1).max(2_147_483_647);
/** A JSON Schema (2020-12) document; checked for being an object here, compiled where used. */
export const JsonSchema = z.record(z.string(), z.unknown());
export const HttpMethod = z.enum(['GET', 'POST', 'PUT', 'PATCH', 'DELETE']);
/** ISO 8601 duration such as `PT30S`, `P1D`, `P1DT12H`. */
export const IsoDuration = z
  .string()
  .regex(/^P(?!$)(\d+W)?(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+(\.\d+)?S)?)?$/, 'an ISO 8601 duration such as PT30S or P1D');

/** A search attribute's name: what `?attr.<name>=` filters on. */
export const ATTRIBUTE_NAME_PATTERN = /^[a-zA-Z][a-zA-Z0-9_]{0,63}$/;
export const AttributeName = z.string().regex(ATTRIBUTE_NAME_PATTERN, 'an attribute name matches ^[a-zA-Z][a-zA-Z0-9_]{0,63}$');
/** How a search attribute is stored and compared: text, a number, or an ISO 8601 instant. */
export const AttributeType = z.enum(['string', 'number', 'time']);
/**
 * A search attribute of the workflow: `value` is set when the instance starts (context: `input`,
 * `workflow`); steps may set it again from their output. Without `type`, each value's own type
 * decides (docs/search-attributes.md).
 */
export const AttributeDecl = z.strictObject({ type: AttributeType.optional(), value: Expr.optional() });
/** A service level: the instance (or the step, from when it is first reached) should be done `within` this ISO 8601 duration. */
export const Sla = z.strictObject({ within: IsoDuration });

export const RetryPolicy = z.strictObject({
  maxAttempts: z.int().min(1).max(1000).optional(),
  initialMs: z.int().min(0).optional(),
  factor: z.number().min(1).optional(),
  maxMs: z.int().min(0).optional(),
});

const ProxyConfig = {
  handler: z.string().min(1).optional(),
  method: HttpMethod.optional(),
  path: z.string().startsWith('/', 'a proxy path starts with /'),
};
const HttpConfig = {
  method: HttpMethod,
  /** A literal `http(s)://` URL, or an expression that evaluates to one. */
  url: z.string().min(1),
  headers: z.record(z.string(), z.string()).optional(),
};
/**
 * A per-key concurrency limit (optional, on effect steps and on the workflow): at most `limit` of
 * the step's calls in flight, or of the workflow's instances not ended, per value of `key`.
 */
export const Concurrency = z.strictObject({ key: Expr, limit: z.int().min(1).max(1_000_000) });

const FuncConfig = { module: z.string().min(1), export: z.string().min(1).optional() };

/**
 * A compensation action: a side effect that undoes a step (`Action`). Its retry
 * policy and per-attempt timeout are its own, not the forward step's.
 */
const actionCommon = { input: Expr.optional(), retry: RetryPolicy.optional(), timeoutMs: z.int().min(1).optional() };
export const Action = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('proxy'), ...ProxyConfig, ...actionCommon }),
  z.strictObject({ kind: z.literal('http'), ...HttpConfig, ...actionCommon }),
  z.strictObject({ kind: z.literal('func'), ...FuncConfig, ...actionCommon }),
]);

const common = {
  input: Expr.optional(),
  next: StepName.nullable().optional(),
  onError: StepName.optional(),
  retry: RetryPolicy.optional(),
  // a Node timer holds at most 2^31 - 1 ms; a longer one would fire at once
  timeoutMs: z.int().min(1).max(2_147_483_647).optional(),
  compensate: Action.optional(),
  output: JsonSchema.optional(),
  sla: Sla.optional(),
};
/** Search attributes an effect step sets when it succeeds, each from the context plus `output` (its own output). */
const effectCommon = { attributes: z.record(AttributeName, Expr).optional() };

/**
 * Steps that call a service: how long in all its 429 and 503 answers may hold the step without
 * using an attempt (ms; absent: the engine's FLOW_THROTTLE_BUDGET_MS).
 */
const callsOut = { throttleBudgetMs: z.int().min(0).max(2_147_483_647).optional() };

export const ProxyStep = z.strictObject({ kind: z.literal('proxy'), ...common, ...effectCommon, ...ProxyConfig, ...callsOut, concurrency: Concurrency.optional() });
export const HttpStep = z.strictObject({ kind: z.literal('http'), ...common, ...effectCommon, ...HttpConfig, ...callsOut, concurrency: Concurrency.optional() });
export const DecisionStep = z.strictObject({
  kind: z.literal('decision'),
  ...common,
  options: z.array(z.string().min(1)).min(1, 'a decision needs at least one option'),
  schema: JsonSchema.optional(),
  approverScope: z.string().min(1).optional(),
  deadline: IsoDuration.optional(),
  onTimeout: StepName.optional(),
});
/** A message name: what `POST …/messages/{name}` delivers and a `waitFor` step waits on. */
export const MESSAGE_NAME_PATTERN = /^[a-zA-Z][a-zA-Z0-9_.-]{0,127}$/;
export const MessageName = z.string().regex(MESSAGE_NAME_PATTERN, 'a message name matches ^[a-zA-Z][a-zA-Z0-9_.-]{0,127}$');
/**
 * Parks until a message named `message` is delivered to the instance (or takes the oldest one
 * already buffered). Its payload, checked at delivery against `schema`, is the step's output. With
 * `timeout`, no message in time is the step error FLOW_MESSAGE_TIMEOUT, which takes `onError`.
 */
export const WaitForStep = z.strictObject({
  kind: z.literal('waitFor'),
  ...common,
  message: MessageName,
  schema: JsonSchema.optional(),
  timeout: IsoDuration.optional(),
});
export const DelayStep = z
  .strictObject({ kind: z.literal('delay'), ...common, duration: IsoDuration.optional(), until: Expr.optional() })
  .refine((s) => (s.duration === undefined) !== (s.until === undefined), {
    message: 'a delay has exactly one of duration or until',
  });
export const FuncStep = z.strictObject({ kind: z.literal('func'), ...common, ...effectCommon, ...FuncConfig, concurrency: Concurrency.optional() });
export const ChildrenStep = z.strictObject({
  kind: z.literal('children'),
  ...common,
  logicId: LogicId,
  version: VersionNumber.optional(),
  items: Expr,
  itemInput: Expr,
  failurePolicy: z.enum(['fail_fast', 'all_settled']),
});
export const EmitStep = z.strictObject({ kind: z.literal('emit'), ...common, event: z.string().min(1), payload: Expr });
export const PassStep = z.strictObject({ kind: z.literal('pass'), ...common });
export const ChoiceStep = z.strictObject({
  kind: z.literal('choice'),
  ...common,
  branches: z.array(z.strictObject({ when: Expr, next: StepName })).min(1, 'a choice needs at least one branch'),
  otherwise: StepName,
});
export const FailStep = z.strictObject({
  kind: z.literal('fail'),
  ...common,
  code: z.string().min(1),
  message: z.string().optional(),
});

export const StepDef = z.discriminatedUnion('kind', [
  ProxyStep,
  HttpStep,
  DecisionStep,
  WaitForStep,
  DelayStep,
  FuncStep,
  ChildrenStep,
  EmitStep,
  PassStep,
  ChoiceStep,
  FailStep,
]);

/** A module import: a host function that maps to a proxy-back target. */
export const Target = z.strictObject({
  handler: z.string().min(1).optional(),
  method: HttpMethod.optional(),
  path: z.string().startsWith('/', 'a target path starts with /'),
});

export const ModuleRef = z.strictObject({
  sha256: z.string().regex(/^[0-9a-f]{64}$/, 'a module sha256 is 64 lowercase hex digits'),
  imports: z.record(z.string().min(1), Target),
});

/** Starts an instance on each event of type `event`, with `input` evaluated over `{ event }`. */
export const StartTrigger = z.strictObject({ event: z.string().min(1), input: Expr });
/**
 * Which live instances a message trigger reaches: those whose correlationId, or whose search
 * attribute `attribute`, equals the expression's value over `{ event }` (null reaches none).
 */
export const TriggerMatch = z.union([z.strictObject({ correlationId: Expr }), z.strictObject({ attribute: AttributeName, value: Expr })]);
/**
 * Delivers each event of type `event` as message `message` (taken by a waitFor step of this
 * version) to every live instance of this version that `match` selects, instead of starting one.
 * `payload` builds the message from `{ event }`. (Default: the event's payload)
 */
export const MessageTrigger = z.strictObject({ event: z.string().min(1), message: MessageName, match: TriggerMatch, payload: Expr.optional() });
export const Trigger = z.union([StartTrigger, MessageTrigger]);

export const ScheduleOverlap = z.enum(['skip', 'buffer_one', 'allow']);
export type ScheduleOverlap = z.infer<typeof ScheduleOverlap>;
/** A schedule's name: part of its id (`<logicId>:<name>`), so a declared schedule keeps it across versions. */
export const SCHEDULE_NAME_PATTERN = /^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$/;
/**
 * A declared schedule: starts an instance at each tick of a five- or six-field cron pattern read
 * in an IANA time zone. The pattern and zone are checked where a document is built (the SDK, with
 * croner) and where it is published (the engine); here only their shape. Defaults in
 * `DEFAULTS.schedule`.
 */
export const ScheduleDef = z.strictObject({
  name: z.string().regex(SCHEDULE_NAME_PATTERN, 'a schedule name matches ^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$').optional(),
  cron: z.string().min(1),
  timezone: z.string().min(1).optional(),
  /** What a tick does while the schedule's previous instance has not ended. */
  overlap: ScheduleOverlap.optional(),
  /** How late a tick may still start (after an outage); an older one is recorded as skipped. */
  catchUp: IsoDuration.optional(),
  /** The input of each instance it starts: a JSON value, checked against the input schema. */
  input: z.unknown().optional(),
});
export type ScheduleDef = z.infer<typeof ScheduleDef>;
export const LogicVersion = z.strictObject({
  schema: z.literal(LOGIC_VERSION_SCHEMA),
  logicId: LogicId,
  version: VersionNumber,
  domain: z.string().min(1),
  hash: z.string().regex(/^sha256:[0-9a-f]{64}$/, 'a hash is sha256: followed by 64 lowercase hex digits'),
  description: z.string().optional(),
  input: JsonSchema,
  start: StepName,
  steps: z.record(StepName, StepDef).refine((s) => Object.keys(s).length > 0, 'a workflow needs at least one step'),
  output: Expr.optional(),
  modules: z.record(z.string().min(1), ModuleRef).optional(),
  triggers: z.array(Trigger).optional(),
  /** How long an ended instance of this definition is kept, overriding the env's retention. */
  retention: z.strictObject({ days: z.number().int().min(1).max(36_500) }).optional(),
  attributes: z.record(AttributeName, AttributeDecl).optional(),
  sla: Sla.optional(),
  schedules: z.array(ScheduleDef).optional(),
  concurrency: Concurrency.optional(),
  /** Claims take an env's instances of higher priority first; a start request may set its own. (Default: 0) */
  priority: z.int().min(-1000).max(1000).optional(),
  source: z.strictObject({ file: z.string(), compiler: z.string() }).partial().optional(),
});

export type LogicVersion = z.infer<typeof LogicVersion>;
export type StepDef = z.infer<typeof StepDef>;
export type StepKind = StepDef['kind'];
export type StepOfKind<K extends StepKind> = Extract<StepDef, { kind: K }>;
export type Action = z.infer<typeof Action>;
export type RetryPolicy = z.infer<typeof RetryPolicy>;
export type Target = z.infer<typeof Target>;
export type Trigger = z.infer<typeof Trigger>;
export type AttributeType = z.infer<typeof AttributeType>;
export type StartTrigger = z.infer<typeof StartTrigger>;
export type MessageTrigger = z.infer<typeof MessageTrigger>;
/** A message trigger delivers to running instances; any other trigger starts one. */
export const isMessageTrigger = (t: Trigger): t is MessageTrigger => 'message' in t;
export type AttributeDecl = z.infer<typeof AttributeDecl>;
export type Concurrency = z.infer<typeof Concurrency>;

export const STEP_KINDS = [
  'proxy',
  'http',
  'decision',
  'waitFor',
  'delay',
  'func',
  'children',
  'emit',
  'pass',
  'choice',
  'fail',
] as const satisfies readonly StepKind[];
