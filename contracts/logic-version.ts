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
};

/**
 * Steps that call a service: how long in all its 429 and 503 answers may hold the step without
 * using an attempt (ms; absent: the engine's FLOW_THROTTLE_BUDGET_MS).
 */
const callsOut = { throttleBudgetMs: z.int().min(0).max(2_147_483_647).optional() };

export const ProxyStep = z.strictObject({ kind: z.literal('proxy'), ...common, ...ProxyConfig, ...callsOut });
export const HttpStep = z.strictObject({ kind: z.literal('http'), ...common, ...HttpConfig, ...callsOut });
export const DecisionStep = z.strictObject({
  kind: z.literal('decision'),
  ...common,
  options: z.array(z.string().min(1)).min(1, 'a decision needs at least one option'),
  schema: JsonSchema.optional(),
  approverScope: z.string().min(1).optional(),
  deadline: IsoDuration.optional(),
  onTimeout: StepName.optional(),
});
export const DelayStep = z
  .strictObject({ kind: z.literal('delay'), ...common, duration: IsoDuration.optional(), until: Expr.optional() })
  .refine((s) => (s.duration === undefined) !== (s.until === undefined), {
    message: 'a delay has exactly one of duration or until',
  });
export const FuncStep = z.strictObject({ kind: z.literal('func'), ...common, ...FuncConfig });
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

export const Trigger = z.strictObject({ event: z.string().min(1), input: Expr });

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

export const STEP_KINDS = [
  'proxy',
  'http',
  'decision',
  'delay',
  'func',
  'children',
  'emit',
  'pass',
  'choice',
  'fail',
] as const satisfies readonly StepKind[];
