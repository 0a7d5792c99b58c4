import { z } from 'zod';
import { checkJwksSettings } from './api/auth.ts';
import { AuthKeysMissing, ConfigInvalid, SecretMissing } from './errors.ts';
import { parseAllowlist } from './executors/allowlist.ts';
import { type HandlerProfiles, loadHandlerProfiles } from './executors/handlers.ts';
import { checkIdentities } from './executors/m2m/settings.ts';
import type { EngineOptions } from './runtime/engine.ts';
import { DEFAULT_TIMEOUT_CAPS, type TimeoutCaps } from './runtime/execute-attempt.ts';
import { DEFAULT_MAX_INPUT_BYTES, DEFAULT_RETRY_AFTER_MAX_MS } from './runtime/storable.ts';
import { MAX_WAIT_MS } from './core/storable.ts';
import type { Db } from './store/db.ts';
import type { EnvWeights } from './store/claim-workflows.ts';
import { isEnvName } from './store/tx.ts';
import type { CircuitOptions, CircuitPolicy } from './runtime/circuits.ts';
import { DEFAULT_THROTTLE_BUDGET_MS } from './core/hold.ts';
import { DEFAULT_MESSAGE_BUFFER_MAX } from './core/messages.ts';
import { DEFAULT_MAX_ROUTED_INSTANCES } from './core/event-routes.ts';
import { DEFAULT_MAX_COMPAT_GROUPS } from './runtime/compatibility-report.ts';
import { DEFAULT_MAX_USAGE_GROUPS } from './runtime/versions.ts';

const list = z.string().transform(parseAllowlist);
// a logicId glob as FLOW_HANDLER_<NAME>_SERVES lists them: logicId characters and `*`
const SERVES_GLOB = /^[A-Za-z0-9._*-]{1,200}$/;
const httpUrl = z.url({ protocol: /^https?$/, error: 'must be an http(s) URL' });

/** The variables the engine reads, each parsed once here. An empty value counts as unset. */
const EnvSchema = z.object({
  DATABASE_URL: z.string().regex(/^postgres(ql)?:\/\//, 'must be a postgres:// or postgresql:// URL').optional(),
  FLOW_DATABASE_LISTEN_URL: z.string().regex(/^postgres(ql)?:\/\//, 'must be a postgres:// or postgresql:// URL').optional(),
  FLOW_SCHEMA: z.string().regex(/^[a-z_][a-z0-9_]{0,62}$/, 'must match ^[a-z_][a-z0-9_]{0,62}$').default('flow'),
  FLOW_ENV: z.string().max(64).default('default'),
  NODE_ENV: z.string().optional(),
  FLOW_TOKEN_SECRET: z.string().min(16, 'must be at least 16 characters').optional(),
  FLOW_OUTBOX_SECRET: z.string().min(16, 'must be at least 16 characters').optional(),
  FLOW_HTTP_ALLOWLIST: list.default([]),
  FLOW_CALLBACK_ALLOWLIST: list.default([]),
  FLOW_EVENT_SINK_URL: httpUrl.optional(),
  FLOW_AUTH_SECRET: z.string().min(32, 'must be at least 32 characters (an HS256 key)').optional(),
  FLOW_AUTH_JWKS_URL: z.string().min(1).optional(),
  FLOW_AUTH_ISSUER: z.string().min(1).optional(),
  FLOW_AUTH_AUDIENCE: z.string().min(1).optional(),
  FLOW_METRICS_OPEN: z.enum(['true', 'false'], { error: 'must be true or false' }).default('false'),
  FLOW_HOST: z.string().min(1).default('127.0.0.1'),
  FLOW_PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  FLOW_STEP_TIMEOUT_MAX_MS: z.coerce.number().int().min(1).max(2_147_483_647).default(DEFAULT_TIMEOUT_CAPS.stepMs),
  FLOW_FUNC_TIMEOUT_MAX_MS: z.coerce.number().int().min(1).max(2_147_483_647).default(DEFAULT_TIMEOUT_CAPS.funcMs),
  // jsonb holds at most 255 MB; a value must also fit a commit's parameter with the rest
  FLOW_MAX_INPUT_BYTES: z.coerce.number().int().min(1024).max(64 * 1024 * 1024).default(DEFAULT_MAX_INPUT_BYTES),
  FLOW_MESSAGE_BUFFER_MAX: z.coerce.number().int().min(0).max(100_000).default(DEFAULT_MESSAGE_BUFFER_MAX),
  // each is work done in one request or one transaction: a cap, never unbounded
  FLOW_TRIGGER_REACH_MAX: z.coerce.number().int().min(1).max(100_000).default(DEFAULT_MAX_ROUTED_INSTANCES),
  FLOW_COMPAT_GROUPS_MAX: z.coerce.number().int().min(1).max(100_000).default(DEFAULT_MAX_COMPAT_GROUPS),
  FLOW_USAGE_GROUPS_MAX: z.coerce.number().int().min(1).max(100_000).default(DEFAULT_MAX_USAGE_GROUPS),
  FLOW_RETRY_AFTER_MAX_MS: z.coerce.number().int().min(0).max(MAX_WAIT_MS).default(DEFAULT_RETRY_AFTER_MAX_MS),
  FLOW_THROTTLE_BUDGET_MS: z.coerce.number().int().min(0).max(MAX_WAIT_MS).default(DEFAULT_THROTTLE_BUDGET_MS),
  FLOW_CIRCUIT_FAILURES: z.coerce.number().int().min(0).max(1_000_000).default(0),
  FLOW_CIRCUIT_OPEN_MS: z.coerce.number().int().min(1).max(MAX_WAIT_MS).default(30_000),
  FLOW_ENV_WEIGHTS: z.string().optional(),
  FLOW_STUCK_PENDING_MS: z.coerce.number().int().min(1).optional(),
  FLOW_STUCK_PARKED_MS: z.coerce.number().int().min(1).optional(),
  FLOW_RETENTION_DAYS: z.coerce.number().int().min(1).max(36_500).optional(),
  FLOW_RETENTION_INTERVAL_MS: z.coerce.number().int().min(1000).max(2_147_483_647).default(60 * 60_000),
  FLOW_ARCHIVE_DIR: z.string().min(1).optional(),
  FLOW_SECRETS_KEY: z
    .string()
    .refine((v) => /^[A-Za-z0-9+/]+={0,2}$/.test(v) && Buffer.from(v, 'base64').length === 32, 'must be 32 bytes in base64 (openssl rand -base64 32)')
    .transform((v) => Buffer.from(v, 'base64'))
    .optional(),
});

// FLOW_RETENTION_DAYS__<ENV>: one env's retention, overriding FLOW_RETENTION_DAYS
const RETENTION_DAYS_OF_ENV = /^FLOW_RETENTION_DAYS__(.+)$/;
const retentionDays = z.coerce.number().int().min(1).max(36_500);

/** Everything the engine process is configured with, typed, read once at boot. */
export interface FlowConfig {
  /** `postgres://…` for `s8flow start`; unset elsewhere (an embedded store). */
  databaseUrl: string | undefined;
  /** A direct connection for LISTEN when `databaseUrl` goes through a transaction-mode pooler (`?pgbouncer=true`). */
  databaseListenUrl: string | undefined;
  /** The schema holding the tables. (Default: `flow`) */
  schema: string;
  /** The environment a request that names none acts in. (Default: `default`) */
  env: string;
  /** NODE_ENV=production: development secrets are refused. */
  production: boolean;
  tokenSecret: string | undefined;
  outboxSecret: string | undefined;
  httpAllowlist: string[];
  callbackAllowlist: string[];
  eventSinkUrl: string | undefined;
  /**
   * How the API verifies bearer tokens: a JWKS (URL or file) in production, HS256 in development.
   * With a JWKS, every token must carry `issuer` as `iss` and name `audience` in `aud`.
   */
  auth: { secret: string | undefined; jwksUrl: string | undefined; issuer: string | undefined; audience: string | undefined };
  /** GET /metrics without a token (FLOW_METRICS_OPEN=true); else it needs `flow:metrics`. (Default: false) */
  metricsOpen: boolean;
  /** Where the API listens. (Default: 127.0.0.1:8080) */
  listen: { host: string; port: number };
  handlers: HandlerProfiles;
  /**
   * The most any attempt may take, whatever its step's `timeoutMs` says: FLOW_STEP_TIMEOUT_MAX_MS,
   * and FLOW_FUNC_TIMEOUT_MAX_MS for func steps' module runs. (Default: 300000 and 60000)
   */
  timeoutCaps: TimeoutCaps;
  /** The largest JSON value the engine stores, from a caller or a step. (Default: 1 MiB) */
  maxInputBytes: number;
  /** How many messages may wait per instance for the waitFor step that takes them. (Default: 100) */
  maxBufferedMessages: number;
  /** The longest wait a `Retry-After` answer may impose. (Default: one hour) */
  maxRetryAfterMs: number;
  /**
   * Caps on what one event or one report may take on: live instances one message trigger reaches
   * with one event, groups a compatibility report evaluates, groups the handler usage report looks
   * at. (Default: 1000, 500, 2000)
   */
  caps: { maxRoutedInstances: number; maxCompatGroups: number; maxUsageGroups: number };
  /** How long in all 429/503 answers may hold a step without using an attempt. (Default: 15 minutes) */
  throttleBudgetMs: number;
  /** When handler circuits open: FLOW_CIRCUIT_* for all, FLOW_HANDLER_<NAME>_CIRCUIT_* per profile. (Default: never) */
  circuits: CircuitOptions;
  /** Instances per env per turn of a claim, from FLOW_ENV_WEIGHTS (`prod=3,staging=1`). (Default: 1 each) */
  envWeights: EnvWeights;
  /** When an instance counts as stuck: runnable and unclaimed, parked on a 202 without timeoutMs. (Default: a minute, a day) */
  stuck: { pendingForMs?: number; parkedForMs?: number };
  /**
   * Days an ended instance is kept (FLOW_RETENTION_DAYS; FLOW_RETENTION_DAYS__<ENV> for one env),
   * how often retention runs, and where instances are archived before removal. (Default: kept for ever, hourly, not archived)
   */
  retention: { days: number | null; envDays: Record<string, number>; intervalMs: number; archiveDir: string | null };
  /** FLOW_SECRETS_KEY: encrypts what the engine keeps of its own credentials (registered OAuth clients). */
  secretsKey: Buffer | undefined;
}

/**
 * Parses the environment into a FlowConfig, or stops boot with FLOW_CONFIG_INVALID naming the
 * variable. In production, missing signing secrets are FLOW_SECRET_MISSING and a missing JWKS is
 * FLOW_AUTH_JWKS_MISSING: the engine would otherwise run with keys anyone can read in this repo.
 */
export function loadConfig(raw: NodeJS.ProcessEnv = process.env): FlowConfig {
  const given = Object.fromEntries(Object.entries(raw).filter(([, v]) => v !== undefined && v !== ''));
  const parsed = EnvSchema.safeParse(given);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new ConfigInvalid(String(issue.path[0] ?? '(environment)'), issue.message);
  }
  const env = parsed.data;
  const production = env.NODE_ENV === 'production';
  if (production && env.FLOW_TOKEN_SECRET === undefined) throw new SecretMissing('FLOW_TOKEN_SECRET');
  if (production && env.FLOW_OUTBOX_SECRET === undefined) throw new SecretMissing('FLOW_OUTBOX_SECRET');
  if (production && env.FLOW_AUTH_JWKS_URL === undefined) throw new AuthKeysMissing('FLOW_AUTH_JWKS_URL');
  const auth = { secret: env.FLOW_AUTH_SECRET, jwksUrl: env.FLOW_AUTH_JWKS_URL, issuer: env.FLOW_AUTH_ISSUER, audience: env.FLOW_AUTH_AUDIENCE };
  checkJwksSettings({ jwks: auth.jwksUrl, issuer: auth.issuer, audience: auth.audience, production });
  const handlers = loadHandlerProfiles(given);
  for (const [name, profile] of handlers) {
    if (!httpUrl.safeParse(profile.url).success) throw new ConfigInvalid(`FLOW_HANDLER_${name}_URL`, 'must be an http(s) URL');
    for (const [suffix, globs] of [['', profile.serves ?? []] as const, ...[...(profile.envServes ?? [])].map(([e, g]) => [`__${e}`, g] as const)]) {
      const bad = globs.find((g) => !SERVES_GLOB.test(g));
      if (bad !== undefined) throw new ConfigInvalid(`FLOW_HANDLER_${name}_SERVES${suffix}`, `${JSON.stringify(bad)} is not a logicId glob (letters, digits, . _ - and *)`);
    }
    checkIdentities(name, profile, { production, secretsKey: env.FLOW_SECRETS_KEY !== undefined });
  }
  return {
    databaseUrl: env.DATABASE_URL,
    databaseListenUrl: env.FLOW_DATABASE_LISTEN_URL,
    schema: env.FLOW_SCHEMA,
    env: env.FLOW_ENV,
    production,
    tokenSecret: env.FLOW_TOKEN_SECRET,
    outboxSecret: env.FLOW_OUTBOX_SECRET,
    httpAllowlist: env.FLOW_HTTP_ALLOWLIST,
    callbackAllowlist: env.FLOW_CALLBACK_ALLOWLIST,
    eventSinkUrl: env.FLOW_EVENT_SINK_URL,
    auth,
    metricsOpen: env.FLOW_METRICS_OPEN === 'true',
    listen: { host: env.FLOW_HOST, port: env.FLOW_PORT },
    handlers,
    timeoutCaps: { stepMs: env.FLOW_STEP_TIMEOUT_MAX_MS, funcMs: env.FLOW_FUNC_TIMEOUT_MAX_MS },
    maxInputBytes: env.FLOW_MAX_INPUT_BYTES,
    maxBufferedMessages: env.FLOW_MESSAGE_BUFFER_MAX,
    maxRetryAfterMs: env.FLOW_RETRY_AFTER_MAX_MS,
    caps: { maxRoutedInstances: env.FLOW_TRIGGER_REACH_MAX, maxCompatGroups: env.FLOW_COMPAT_GROUPS_MAX, maxUsageGroups: env.FLOW_USAGE_GROUPS_MAX },
    retention: {
      days: env.FLOW_RETENTION_DAYS ?? null,
      envDays: retentionEnvDays(given),
      intervalMs: env.FLOW_RETENTION_INTERVAL_MS,
      archiveDir: env.FLOW_ARCHIVE_DIR ?? null,
    },
    throttleBudgetMs: env.FLOW_THROTTLE_BUDGET_MS,
    circuits: circuitOptions(given, { failures: env.FLOW_CIRCUIT_FAILURES, openMs: env.FLOW_CIRCUIT_OPEN_MS }),
    envWeights: env.FLOW_ENV_WEIGHTS === undefined ? {} : parseEnvWeights(env.FLOW_ENV_WEIGHTS),
    stuck: {
      ...(env.FLOW_STUCK_PENDING_MS === undefined ? {} : { pendingForMs: env.FLOW_STUCK_PENDING_MS }),
      ...(env.FLOW_STUCK_PARKED_MS === undefined ? {} : { parkedForMs: env.FLOW_STUCK_PARKED_MS }),
    },
    secretsKey: env.FLOW_SECRETS_KEY,
  };
}

/** Each FLOW_RETENTION_DAYS__<ENV> as env → days; a bad figure is FLOW_CONFIG_INVALID naming the variable. */
function retentionEnvDays(given: Record<string, string | undefined>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, value] of Object.entries(given)) {
    const env = RETENTION_DAYS_OF_ENV.exec(name)?.[1];
    if (env === undefined) continue;
    const days = retentionDays.safeParse(value);
    if (!days.success) throw new ConfigInvalid(name, 'must be a whole number of days from 1 to 36500');
    out[env] = days.data;
  }
  return out;
}

/** `prod=3, staging=1` → { prod: 3, staging: 1 }: each a valid env name once, each weight a whole number 1–100. */
export function parseEnvWeights(value: string): EnvWeights {
  const weights: Record<string, number> = {};
  for (const part of value.split(',').map((p) => p.trim()).filter((p) => p !== '')) {
    const m = /^(.+?)\s*=\s*(\d{1,3})$/.exec(part);
    const weight = m === null ? Number.NaN : Number(m[2]);
    if (m === null || !isEnvName(m[1]!) || !(weight >= 1 && weight <= 100)) {
      throw new ConfigInvalid('FLOW_ENV_WEIGHTS', `${JSON.stringify(part)} is not <env>=<weight> with a weight from 1 to 100`);
    }
    if (m[1]! in weights) throw new ConfigInvalid('FLOW_ENV_WEIGHTS', `env ${JSON.stringify(m[1])} is weighted twice`);
    weights[m[1]!] = weight;
  }
  return weights;
}

/** The global circuit policy and each FLOW_HANDLER_<NAME>_CIRCUIT_FAILURES / _CIRCUIT_OPEN_MS over it. */
function circuitOptions(given: Record<string, string | undefined>, policy: CircuitPolicy): CircuitOptions {
  const handlers = new Map<string, CircuitPolicy>();
  for (const [key, value] of Object.entries(given)) {
    const m = /^FLOW_HANDLER_(.+)_CIRCUIT_(FAILURES|OPEN_MS)$/.exec(key);
    if (m === null) continue;
    const n = Number(value);
    const min = m[2] === 'FAILURES' ? 0 : 1;
    if (!Number.isInteger(n) || n < min || n > MAX_WAIT_MS) throw new ConfigInvalid(key, `must be a whole number from ${min}`);
    const own = handlers.get(m[1]!) ?? { ...policy };
    handlers.set(m[1]!, m[2] === 'FAILURES' ? { ...own, failures: n } : { ...own, openMs: n });
  }
  return { policy, handlers };
}

/** NODE_ENV=production, for commands that must refuse to run there before reading anything else. */
export function isProduction(env: NodeJS.ProcessEnv = process.env): boolean {
  return env.NODE_ENV === 'production';
}

/** The Engine's options from the config; `extra` adds what is not configuration (workers, observer, a module runtime). */
export function engineOptionsFrom(config: FlowConfig, db: Db, extra: Partial<EngineOptions> = {}): EngineOptions {
  return {
    db,
    env: config.env,
    production: config.production,
    ...(config.tokenSecret ? { tokenSecret: config.tokenSecret } : {}),
    ...(config.outboxSecret ? { outboxSecret: config.outboxSecret } : {}),
    callbackAllowlist: config.callbackAllowlist,
    maxInputBytes: config.maxInputBytes,
    maxBufferedMessages: config.maxBufferedMessages,
    maxRetryAfterMs: config.maxRetryAfterMs,
    ...config.caps,
    throttleBudgetMs: config.throttleBudgetMs,
    circuits: config.circuits,
    stuck: config.stuck,
    retention: config.retention,
    ...(config.secretsKey ? { secretsKey: config.secretsKey } : {}),
    ...(config.eventSinkUrl ? { eventSink: { url: config.eventSinkUrl } } : {}),
    ...extra,
    worker: { timeoutCaps: config.timeoutCaps, envWeights: config.envWeights, ...extra.worker },
    executors: { handlers: config.handlers, httpAllowlist: config.httpAllowlist, ...extra.executors },
  };
}
