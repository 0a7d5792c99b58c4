import { Circuits, type CircuitOptions } from './circuits.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  CreateWorkflowRequest,
  type FlowError,
  type StepOutcome,
  TERMINAL_STATES,
  type WorkflowRecord,
} from '../../contracts/index.ts';
import { BadRequest, CallbackNotAllowed, SecretMissing, SettleTimeout } from '../errors.ts';
import { hostAllowed } from '../executors/allowlist.ts';
import { createExecutors, type ExecutorOptions, Identities } from '../executors/index.ts';
import { pgRegistrations } from '../store/m2m-registrations.ts';
import type { Db } from '../store/db.ts';
import type { Stored } from '../store/rows.ts';
import { NotFound } from '../store/errors.ts';
import type { StuckThresholds } from '../store/workflow-filter.ts';
import { loadRecord } from '../store/load-workflow.ts';
import { asScheduler, inEnv } from '../store/tx.ts';
import type { FuncRuntime } from '../../host-functions/index.ts';
import type { CompatibilityReport } from '../../contracts/api/compatibility.ts';
import type { HandlerUsageList } from '../../contracts/api/handlers.ts';
import { compatibilityReport, DEFAULT_MAX_COMPAT_GROUPS } from './compatibility-report.ts';
import { dbFuncRuntime } from './module-store.ts';
import { type ActedBy, type PublishResult, type VersionDetail, type VersionSummary, Versions } from './versions.ts';
import { LogicCache } from './logic-cache.ts';
import { mutateWorkflow } from './mutate.ts';
import { authorize, Operations } from './operations.ts';
import { ResumeTokens } from './resume-tokens.ts';
import { GrantGate } from './grant-gate.ts';
import { OPERATOR_GRANT, type PublisherGrant } from '../../contracts/grants.ts';
import { DEFAULT_MAX_ROUTED_INSTANCES } from '../core/event-routes.ts';
import { IngestEventRequest, type IngestResult, ingestEvent } from './ingest-event.ts';
import { OutboxRelay, type RelayTuning } from './outbox-relay.ts';
import { startPinned } from './start-instance.ts';
import { checkStorable, DEFAULT_MAX_INPUT_BYTES, DEFAULT_RETRY_AFTER_MAX_MS } from './storable.ts';
import { type AuditRow, envOfWorkflow } from '../store/audit.ts';
import { findAppliedCallback } from '../store/applied-callback.ts';
import { answerRepeatedCallback } from '../core/repeated-callback.ts';
import { decisionOf } from '../core/journal.ts';
import type { ResumeArgs } from '../core/wake.ts';
import type { Context } from '@opentelemetry/api';
import { EngineMetrics } from './metrics.ts';
import { type FlowLogger, logObserver, silentLogger } from './log.ts';
import type { TransitionObserver } from './observer.ts';
import { type Delivery, Messages } from './messages.ts';
import { DEFAULT_MESSAGE_BUFFER_MAX } from '../core/messages.ts';
import type { DeliveryAnswer } from '../store/messages.ts';
import type { Instance } from '../core/instance.ts';
import { DEFAULT_CONCURRENCY, type WorkerOptions, WorkerPool } from './worker-pool.ts';
import { WorkAnnouncer } from './work-announcer.ts';
import { Batcher } from './batcher.ts';
import { insertPinned, insertPinnedBatch, type PinnedParams, type PinnedRow } from '../store/insert-workflow.ts';
import { HistoryVerbs } from './history-verbs.ts';
import { Retention, type RetentionOptions } from './retention.ts';
import { Schedules } from './schedules.ts';
import { Permits } from './permits.ts';

/**
 * How long a completion that overtook the commit of its step's 202 answer waits for that commit
 * before it is refused with FLOW_NOT_YET_WAITING (the caller sends it again).
 */
const EARLY_COMPLETION_WAIT_MS = 2_000;

/** A service's completion of a step it answered 202: an output, or an error (retryable or not). */
export interface CompletionBody {
  output?: unknown;
  error?: { code: string; message: string };
  retryable?: boolean;
}

export interface EngineOptions {
  db: Db;
  /** The environment used when a request names none. (Default: `default`) */
  env?: string;
  /**
   * Executors' settings. `funcRuntime` defaults to one that loads modules from the database
   * (`dbFuncRuntime`), closed with the engine.
   */
  executors?: ExecutorOptions;
  worker?: WorkerOptions;
  observer?: TransitionObserver;
  /**
   * Refuse the development secrets: without `tokenSecret` and `outboxSecret` the constructor
   * throws FLOW_SECRET_MISSING. (Default: false; `engineOptionsFrom(config)` sets it from NODE_ENV)
   */
  production?: boolean;
  /**
   * Signs resume tokens; every engine process of a deployment needs the same. (Default: outside
   * production a fixed development secret; in production none: FLOW_SECRET_MISSING)
   */
  tokenSecret?: string;
  /**
   * Hosts a start request's `callback.url` may name (`host`, `host:port`, `*`); any other is
   * refused, so a caller cannot point the engine at internal services. (Default: none: callbacks
   * are refused)
   */
  callbackAllowlist?: readonly string[];
  /** Where the outbox relay POSTs `emit` events. (Default: none: they wait) */
  eventSink?: { url: string };
  /** Signs outbox deliveries (X-Flow-Signature); receivers verify with it. (Default: as tokenSecret) */
  outboxSecret?: string;
  relay?: RelayTuning;
  /**
   * The largest JSON, in UTF-8 bytes, that comes into the engine to be stored. From a caller (a
   * start's input, an event's payload, a decision's payload, a completion) a larger one is refused
   * with FLOW_INPUT_TOO_LARGE before anything is written; from a step (a response body, a
   * module's output, a host call's answer) it fails the step FLOW_RESULT_TOO_LARGE, and a response
   * body is not read past it. (Default: 1 MiB)
   */
  maxInputBytes?: number;
  /**
   * How many messages may wait per instance for the waitFor step that takes them; a delivery
   * beyond it is refused with FLOW_MESSAGE_BUFFER_FULL. (Default: 100)
   */
  maxBufferedMessages?: number;
  /**
   * The most live instances one message trigger may reach with one event; an event whose match
   * selects more is refused with FLOW_TRIGGER_ROUTE_INVALID. (Default: 1000)
   */
  maxRoutedInstances?: number;
  /**
   * The most groups of live instances a compatibility report evaluates; past it the report is
   * `truncated` and unsafe. (Default: 500)
   */
  maxCompatGroups?: number;
  /**
   * The most groups of live instances the handler usage report looks at; the instances beyond them
   * count as still needing every path (`ungrouped`). (Default: 2000)
   */
  maxUsageGroups?: number;
  /**
   * The longest wait a `Retry-After` answer may impose before the next attempt; a longer one is
   * cut to it. (Default: 3600000, one hour)
   */
  maxRetryAfterMs?: number;
  /**
   * How long in all a step's 429 and 503 answers may hold it without using an attempt, unless the
   * step sets `throttleBudgetMs` (core/hold.ts). (Default: 900000, 15 minutes)
   */
  throttleBudgetMs?: number;
  /** When a handler profile's circuit opens, per profile or for all (circuits.ts). (Default: never) */
  circuits?: CircuitOptions;
  /** Structured log lines (pino) for failures, retries, dead letters, compensations, lost leases. (Default: none) */
  logger?: FlowLogger;
  /**
   * How long ended instances are kept, per env, and where they are archived first
   * (FLOW_RETENTION_DAYS, FLOW_RETENTION_DAYS__<ENV>, FLOW_ARCHIVE_DIR). (Default: kept for ever)
   */
  retention?: RetentionOptions;
  /** How often this engine sweeps permits a crashed holder left (runtime/permits.ts). (Default: 1000) */
  permitSweepMs?: number;
  /** When an instance counts as stuck in listings and the Overview. (Default: pending a minute, parked on a 202 without timeoutMs a day) */
  stuck?: Partial<StuckThresholds>;
  /**
   * FLOW_SECRETS_KEY (32 bytes): seals the OAuth clients registered for handler identities, kept
   * in Postgres for every node. (Default: none: a profile with OAUTH_REGISTER fails its calls)
   */
  secretsKey?: Buffer;
  /** The clock cached access tokens expire on; tests move it. (Default: Date.now) */
  identityClock?: () => number;
  /**
   * The schedules' clock: when a tick is due, and the time a trigger or backfill is judged at.
   * Tests pass a manual one. (Default: the database's `now()`)
   */
  clock?: () => Date;
}

export interface SettleOptions {
  /** (Default: the engine's env) */
  env?: string;
  /** How often the store is read. (Default: 20) */
  pollMs?: number;
  /** How long to wait before rejecting with FLOW_SETTLE_TIMEOUT. (Default: 60000) */
  timeoutMs?: number;
}

/**
 * The caller's trace context, for the entry points that start or resume an instance: the API
 * passes the request's `traceparent` (engine/tracing.ts, `callerContext`). (Default: the context
 * active now, as the caller's own OpenTelemetry SDK keeps it)
 */
export interface Traced {
  traceContext?: Context;
}

/** The engine's entry points. Workers are not started until `workers.start()`. */
export class Engine {
  readonly db: Db;
  readonly env: string;
  readonly workers: WorkerPool;
  readonly logics: LogicCache;
  readonly tokens: ResumeTokens;
  /** Operator verbs and listings. */
  readonly ops: Operations;
  /** Legal hold, its release, and erasure. */
  readonly history: HistoryVerbs;
  /** Removes ended instances past their retention; scheduled with the workers (`workers.start()`). */
  readonly retention: Retention;
  /** Delivers outbox rows (events, callbacks); runs with the workers, or by hand with relayOnce(). */
  readonly outbox: OutboxRelay;
  /** Cron schedules: declared by versions or made through the API; fired by the workers' timer loop. */
  readonly schedules: Schedules;
  /** Messages to running instances: delivery, the buffer, and the hand-over to waitFor steps. */
  readonly messages: Messages;
  readonly #callbackHosts: ReadonlySet<string>;
  readonly #maxInputBytes: number;
  readonly #maxRoutedInstances: number;
  readonly #maxCompatGroups: number;

  /** Handler and per-key limits: what is limited, and the permits (runtime/permits.ts). */
  readonly permits: Permits;
  /** Prometheus metrics (`flow_*`); `render()` gives the `/metrics` body. */
  readonly metrics: EngineMetrics;
  /** The structured log (EngineOptions.logger): the runtime's lines, with `instanceFields()` on each. */
  readonly log: FlowLogger;
  /** Metrics, log lines and the caller's hooks: told of every committed transition, the worker loop's and the verbs'. */
  readonly #observer: TransitionObserver;
  readonly #versions: Versions;
  /** The grant rule at execution: which handlers each version may call (ARCHITECTURE.md, Invariants). */
  readonly #grants: GrantGate;
  /**
   * The handlers' machine identities: OAuth tokens, client certificates, registrations kept in
   * this store. `identities.prepare()` registers at boot (`s8flow start` calls it after migrating).
   */
  readonly identities: Identities;
  /** The module runtime this engine made (none when one was passed in): closed with it. */
  readonly #ownFuncs: FuncRuntime | null;
  /** NOTIFY flow_work after starts left to a claim, coalesced (work-announcer.ts). */
  readonly #announcer: WorkAnnouncer;
  /** Starts that arrive together, committed as one statement (migration 0052). */
  readonly #starts: Batcher<PinnedParams, PinnedRow | null>;

  constructor(opts: EngineOptions) {
    this.db = opts.db;
    this.env = opts.env ?? 'default';
    const production = opts.production ?? false;
    this.logics = new LogicCache(opts.db);
    const handlers = opts.executors?.handlers ?? new Map();
    this.#grants = new GrantGate(opts.db, handlers);
    this.schedules = new Schedules(opts.db, this.logics, {
      clock: opts.clock,
      onStarted: () => this.workers.wake(),
      onError: (err) => this.#observer.onError?.(null, err),
      log: opts.logger ?? silentLogger,
    });
    this.#versions = new Versions(
      opts.db,
      this.logics,
      this.#grants,
      handlers,
      (c, env, logicId) => this.schedules.syncDeclared(c, env, logicId),
      opts.maxUsageGroups,
    );
    this.tokens = new ResumeTokens(secret(opts.tokenSecret, 'FLOW_TOKEN_SECRET', production));
    this.#callbackHosts = new Set(opts.callbackAllowlist ?? []);
    this.#maxInputBytes = opts.maxInputBytes ?? DEFAULT_MAX_INPUT_BYTES;
    this.#maxRoutedInstances = opts.maxRoutedInstances ?? DEFAULT_MAX_ROUTED_INSTANCES;
    this.#maxCompatGroups = opts.maxCompatGroups ?? DEFAULT_MAX_COMPAT_GROUPS;
    const outboxSecret = secret(opts.outboxSecret, 'FLOW_OUTBOX_SECRET', production);
    const given = opts.executors ?? {};
    this.#ownFuncs = given.funcRuntime === undefined && given.func === undefined ? dbFuncRuntime(opts.db) : null;
    this.identities =
      given.identities ??
      new Identities(handlers, {
        registrations: pgRegistrations(opts.db),
        ...(opts.secretsKey === undefined ? {} : { secretsKey: opts.secretsKey }),
        ...(opts.identityClock === undefined ? {} : { now: opts.identityClock }),
      });
    const limited = { maxBodyBytes: this.#maxInputBytes, ...given, identities: this.identities };
    const executors = this.#grants.wrap(createExecutors(this.#ownFuncs === null ? limited : { ...limited, funcRuntime: this.#ownFuncs }));
    this.metrics = new EngineMetrics(opts.db);
    this.log = opts.logger ?? silentLogger;
    // an instance that parks on a waitFor step takes its oldest buffered message at once
    const handOver: TransitionObserver = {
      onTransition: (_from, t, committed) => {
        if (committed && t.instance.state === 'waiting') void this.#handOverIfWaitFor(t.instance).catch((err: unknown) => observer.onError?.(t.instance.id, err));
      },
    };
    const observer = observeAll(this.metrics, logObserver(this.log), handOver, opts.observer ?? {});
    this.#observer = observer;
    this.#announcer = new WorkAnnouncer(opts.db, (err) => observer.onError?.(null, err));
    this.#starts = new Batcher(opts.db.pool, { many: insertPinnedBatch, one: insertPinned });
    this.messages = new Messages(opts.db, this.logics, {
      maxBuffered: opts.maxBufferedMessages ?? DEFAULT_MESSAGE_BUFFER_MAX,
      maxInputBytes: this.#maxInputBytes,
      observer,
    });
    const limits = {
      maxBytes: this.#maxInputBytes,
      maxRetryAfterMs: opts.maxRetryAfterMs ?? DEFAULT_RETRY_AFTER_MAX_MS,
      ...(opts.throttleBudgetMs === undefined ? {} : { throttleBudgetMs: opts.throttleBudgetMs }),
    };
    const circuits = opts.circuits === undefined ? undefined : new Circuits(opts.db, opts.circuits, this.log);
    this.permits = new Permits(opts.db, handlers, (err) => observer.onError?.(null, err), opts.permitSweepMs, 2 * (opts.worker?.concurrency ?? DEFAULT_CONCURRENCY));
    this.workers = new WorkerPool(opts.db, this.logics, executors, this.tokens, observer, { ...opts.worker, ...(circuits ? { circuits } : {}) }, limits, this.permits);
    this.ops = new Operations(
      opts.db,
      this.logics,
      this.env,
      (id, env) => {
        this.workers.wake(env);
        return this.get(id, env);
      },
      { ...(opts.stuck === undefined ? {} : { stuck: opts.stuck }), observer, log: this.log },
    );
    this.history = new HistoryVerbs(opts.db, this.env, (id, env) => this.get(id, env), this.log);
    this.retention = new Retention(opts.db, opts.retention ?? { days: null, envDays: {} }, this.log);
    this.outbox = new OutboxRelay(opts.db, {
      ...opts.relay,
      secret: outboxSecret,
      eventSink: opts.eventSink ?? null,
      callbackAllowlist: opts.callbackAllowlist ?? [],
      onError: (err) => observer.onError?.(null, err),
    });
    this.workers.attach(this.outbox);
    this.workers.attachTicker({ fire: () => this.schedules.fireDue() });
    this.workers.attachTicker(this.messages);
  }

  async #handOverIfWaitFor(inst: Instance): Promise<void> {
    const step = inst.ctx.running?.step;
    const logic = await this.logics.get(inst.env, inst.logicHash);
    if (step === undefined || logic.steps[step]?.kind !== 'waitFor') return;
    if (await this.messages.handOver(inst.env, inst.id)) this.workers.wake(inst.env);
  }

  /**
   * Delivers message `name` to an instance (`POST …/workflows/{id}/messages/{name}`): handed to
   * the waitFor step it is parked on, or buffered until it reaches one (runtime/messages.ts). A
   * repeat of the Idempotency-Key is answered with the first answer.
   */
  async deliverMessage(id: string, m: Delivery, opts: { env?: string } = {}): Promise<DeliveryAnswer> {
    const answer = await this.messages.deliver(opts.env ?? this.env, id, m);
    this.workers.wake(opts.env ?? this.env);
    return answer;
  }

  /**
   * An approver answers the decision the instance is parked on (`resume`). The
   * approver needs `flow:decide` for the instance's definition and, where the step declares one,
   * its `approverScope`; its subject is audited and forwarded as X-Flow-Approved-By.
   */
  async resume(id: string, args: ResumeArgs, opts: { env?: string; reason?: string } & Traced = {}): Promise<WorkflowRecord> {
    const env = opts.env ?? this.env;
    checkStorable('the decision payload', args.payload ?? null, this.#maxInputBytes);
    await mutateWorkflow(this.db, this.logics, env, id, { type: 'resume', args }, {
      observer: this.#observer,
      ...(opts.traceContext === undefined ? {} : { caller: opts.traceContext }),
      allow: (inst) => authorize(args.approver, 'flow:decide', inst),
      audit: {
        verb: 'resume',
        actor: args.approver.subject,
        reason: opts.reason ?? null,
        args: { step: args.step, option: args.option, payload: args.payload ?? null, scopes: args.approver.scopes },
      },
    });
    this.workers.wake(env);
    return this.get(id, env);
  }

  /**
   * The owning service completes a step it answered with 202 waiting. The token names the
   * instance and attempt; the env is read from the instance, never from the caller.
   */
  async complete(token: string, body: CompletionBody): Promise<WorkflowRecord> {
    return (await this.completeCallback(token, body)).record;
  }

  /**
   * `complete`, answering with the state the completion left the instance in. A repeat of a
   * completion already applied — the same token, the same body — answers as the first delivery
   * did and changes nothing; another body for that token is FLOW_CALLBACK_ANSWERED_DIFFERENTLY.
   */
  async completeCallback(token: string, body: CompletionBody, opts: Traced = {}): Promise<{ record: WorkflowRecord; state: string }> {
    const { workflowId, seq } = this.tokens.verify(token);
    checkStorable('the completion', body, this.#maxInputBytes);
    const env = await asScheduler(this.db, (c) => envOfWorkflow(c, workflowId));
    if (env === null) throw new NotFound(`workflow ${workflowId}`);
    const outcome: StepOutcome =
      body.error !== undefined
        ? { status: 'failed', retryable: body.retryable ?? false, error: body.error }
        : { status: 'succeeded', output: body.output ?? null };
    // a completion may overtake the commit of the 202 answer it completes (a service that calls
    // back at once): give that commit a moment to land before refusing
    for (let waitedMs = 0; ; ) {
      try {
        const caller = opts.traceContext === undefined ? {} : { caller: opts.traceContext };
        const t = await mutateWorkflow(this.db, this.logics, env, workflowId, { type: 'callback', seq, outcome }, { observer: this.#observer, ...caller });
        this.workers.wake(env);
        return { record: await this.get(workflowId, env), state: decisionOf(t).state };
      } catch (err) {
        const code = (err as FlowError).code;
        if (code === 'FLOW_STALE_TOKEN') return this.#repeatedCallback(env, workflowId, seq, outcome, err);
        if (code !== 'FLOW_NOT_YET_WAITING' || waitedMs >= EARLY_COMPLETION_WAIT_MS) throw err;
        const ms = Math.min(100, 5 + waitedMs);
        await sleep(ms);
        waitedMs += ms;
      }
    }
  }

  /** A token whose attempt is over: a repeat of the completion that ended it, or stale (`refusal`). */
  async #repeatedCallback(env: string, id: string, seq: number, outcome: StepOutcome, refusal: unknown) {
    const applied = await inEnv(this.db, env, (c) => findAppliedCallback(c, id, seq));
    const state = answerRepeatedCallback(id, applied, outcome, refusal);
    return { record: await this.get(id, env), state };
  }

  /**
   * Validates and publishes a LogicVersion with the WASM modules it needs (keyed by the hex sha256
   * of their bytes), so every engine node on this database runs it at once. Idempotent by hash:
   * `unchanged` when the same version was published before; another hash under the same
   * (logicId, version) is FLOW_VERSION_CONFLICT. Refuses modules that do not hash to their key
   * (FLOW_MODULE_HASH_MISMATCH) and a version naming a module neither uploaded now nor stored in
   * the env (FLOW_MODULE_MISSING).
   *
   * `publisher` is the grant the version is published under and recorded with (contracts/grants.ts):
   * a version that would do more than it allows is refused (FLOW_GRANT_HANDLER, FLOW_GRANT_CHILD,
   * FLOW_GRANT_EVENT). Without one the publish is the operator's, which holds every grant.
   */
  publishVersion(env: string, doc: unknown, modules?: Record<string, Uint8Array>, publisher: PublisherGrant = OPERATOR_GRANT): Promise<PublishResult> {
    return this.#versions.publish(env, doc, modules ?? {}, publisher);
  }

  /** Publishes a version whose modules (if any) are already stored; true when it was new. */
  async publish(doc: unknown, env = this.env): Promise<boolean> {
    return (await this.publishVersion(env, doc)).status === 'new';
  }

  /** Every version published in the env, with whether it is active and how many instances run on it. */
  listVersions(env: string): Promise<VersionSummary[]> {
    return this.#versions.list(env);
  }

  /**
   * Every handler profile and path the env's versions call (active or retired), with their live
   * instances by state and by where they stand, and whether each may be turned off now. Versions
   * `readable` refuses are counted in every verdict but not named. A `filter` naming a handler or
   * path no version calls is refused (`FLOW_UNCALLED_HANDLER`).
   */
  handlerUsage(env: string, readable: (logicId: string) => boolean = () => true, filter: { handler?: string; path?: string } = {}): Promise<HandlerUsageList> {
    return this.#versions.handlerUsage(env, readable, filter);
  }

  /**
   * The compatibility report of a candidate version (not published) against the live instances of
   * `against` (default: the highest active version below the candidate): grouped by where they
   * are, each group safe or unsafe with its reasons, and what its representative would run next;
   * with `replay`, the last ended instances replayed on the candidate and where each diverges.
   * Reads only; calls nothing (engine/runtime/compatibility-report.ts).
   */
  compatibility(env: string, logicId: string, candidate: unknown, against?: number, opts: { replay?: number } = {}): Promise<CompatibilityReport> {
    return compatibilityReport(this.db, env, logicId, candidate, against, { ...opts, maxGroups: this.#maxCompatGroups });
  }

  /** One version: its document, active flag, in-flight count, publication time and Mermaid diagram. */
  getVersion(env: string, logicId: string, version: number): Promise<VersionDetail> {
    return this.#versions.get(env, logicId, version);
  }

  /**
   * Retires (`false`: drains) or reactivates a version. A retired version starts nothing new
   * (FLOW_VERSION_RETIRED), by request or by event trigger; its running instances finish.
   */
  setVersionActive(env: string, logicId: string, version: number, active: boolean, by?: ActedBy): Promise<VersionSummary> {
    return this.#versions.setActive(env, logicId, version, active, by);
  }

  /** Who published, retired and reactivated a version, and why (its audit rows, oldest first). */
  versionAudit(env: string, logicId: string, version: number): Promise<AuditRow[]> {
    return this.#versions.audit(env, logicId, version);
  }

  /**
   * Starts an instance pinned to the requested version (or the highest active one), with its first step
   * already prepared. The same idempotency key with the same request returns the first instance
   * instead; with a different request it is refused (FLOW_IDEMPOTENCY_MISMATCH, 409). An optional
   * `callback: { url }` receives a notification on every transition into a terminal state.
   */
  async start(request: unknown, opts: Traced = {}): Promise<{ id: string; created: boolean }> {
    const { id, created } = await this.#start(request, false, opts);
    return { id, created };
  }

  /**
   * As `start`, and answers the instance's WorkflowRecord, read in the statement that starts it:
   * what the HTTP API returns, without a transaction of its own (migration 0047).
   */
  async startRecord(request: unknown, opts: Traced = {}): Promise<{ record: WorkflowRecord; created: boolean }> {
    const { record, created } = await this.#start(request, true, opts);
    return { record: record!, created };
  }

  async #start(request: unknown, withRecord: boolean, opts: Traced): Promise<{ id: string; created: boolean; record: WorkflowRecord | null }> {
    const parsed = CreateWorkflowRequest.safeParse(request);
    if (!parsed.success) {
      throw new BadRequest('the start request', parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`));
    }
    const req = parsed.data;
    checkStorable('the input', req.input, this.#maxInputBytes);
    const callback = req.callback === undefined ? null : new URL(req.callback.url);
    if (callback !== null && !hostAllowed(this.#callbackHosts, callback)) throw new CallbackNotAllowed(callback.host);
    const env = req.env ?? this.env;
    // an executor free here: the instance is leased to this engine as it is inserted (migration 0045)
    const lease = this.workers.reserve(env);
    let result: { id: string; created: boolean; record: WorkflowRecord | null; leased: Stored | null; claimable: boolean };
    try {
      // the version found before is checked by the insert; when it no longer holds, found again
      for (let tries = 0; ; tries++) {
        if (tries === 3) throw new Error(`LogicVersion ${req.logicId}: the version to start changed three times during one start`);
        const logic = await this.logics.toStart(env, req.logicId, req.version, tries > 0);
        const spec = {
          env,
          input: req.input,
          correlationId: req.correlationId ?? null,
          idempotencyKey: req.idempotencyKey ?? null,
          requestedVersion: req.version ?? null,
          callbackUrl: req.callback?.url ?? null,
          ...(opts.traceContext === undefined ? {} : { traceContext: opts.traceContext }),
          ...(req.priority === undefined ? {} : { priority: req.priority }),
          lease,
          pin: { logicId: req.logicId, version: req.version ?? null, hash: logic.hash },
          // told to every node's claim loop below, once committed, not by the start's own commit
          announced: true,
          // with the others that arrive meanwhile (migration 0052); but one that holds an
          // executor of this engine goes out alone: waiting in the batcher, it kept that executor
          // idle, and the starts after it, finding none free, were left to claims (an unlimited
          // handler beside a rate-limited backlog ran at 0.37-0.47 of its speed alone)
          ...(lease === null ? { send: this.#starts.send } : {}),
        };
        // one statement, the record read in it when asked for (migrations 0046, 0047)
        const started = await startPinned(this.db, this.logics, logic, { ...spec, withRecord });
        if (started !== null) {
          result = started;
          break;
        }
      }
    } catch (err) {
      lease?.release();
      throw err;
    }
    if (result.leased !== null) lease!.adopt(result.leased);
    else {
      if (lease !== null) lease.release(); // it wakes the claim loop
      else this.workers.wake(env);
      if (result.claimable) this.#announcer.announce();
    }
    return result;
  }

  /**
   * Records an event, starts one instance per start trigger on its type, pinned to the version
   * active now, and delivers it as a message through each message trigger on its type to the live
   * instances it matches, in one transaction. A repeated idempotency key starts and delivers
   * nothing and answers what the first did.
   */
  async ingestEvent(event: unknown, opts: Traced = {}): Promise<IngestResult> {
    const parsed = IngestEventRequest.safeParse(event);
    if (!parsed.success) {
      throw new BadRequest('the event', parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`));
    }
    checkStorable('the event payload', parsed.data.payload ?? null, this.#maxInputBytes);
    const env = parsed.data.env ?? this.env;
    const { committed, ...result } = await inEnv(this.db, env, (c) =>
      ingestEvent(
        c,
        { logics: this.logics, messages: this.messages, maxInputBytes: this.#maxInputBytes, maxRoutedInstances: this.#maxRoutedInstances },
        env,
        parsed.data,
        opts.traceContext,
      ),
    );
    for (const done of committed) this.messages.told(done);
    if (result.created && (result.ids.length > 0 || committed.length > 0)) this.workers.wake(env);
    return result;
  }

  async get(id: string, env = this.env): Promise<WorkflowRecord> {
    const record = await loadRecord(this.db, env, id);
    if (record === null) throw new NotFound(`workflow ${id}`);
    return record;
  }

  /**
   * Resolves once the instance is terminal or parked (`waiting`) on something other than its own
   * children — those this engine's workers run on — polling the store. Rejects with
   * FLOW_SETTLE_TIMEOUT when that takes longer than `timeoutMs`. A string is the env.
   */
  async settled(id: string, opts: SettleOptions | string = {}): Promise<WorkflowRecord> {
    const { env = this.env, pollMs = 20, timeoutMs = 60_000 } = typeof opts === 'string' ? { env: opts } : opts;
    const until = Date.now() + timeoutMs;
    for (;;) {
      const record = await this.get(id, env);
      if (TERMINAL_STATES.has(record.state as never)) return record;
      if (record.state === 'waiting') {
        const logic = await this.logics.get(env, record.logicHash);
        if (logic.steps[record.currentStep ?? '']?.kind !== 'children') return record;
      }
      if (Date.now() >= until) throw new SettleTimeout(id, record.state, timeoutMs);
      await new Promise((r) => setTimeout(r, pollMs));
    }
  }

  async close(): Promise<void> {
    await this.retention.stop();
    await this.workers.stop();
    await this.#announcer.drain();
    await this.#ownFuncs?.close();
    this.identities.close();
  }
}

/** Several observers as one, each told in order (the metrics first, so they count before a caller's hook runs). */
function observeAll(...all: TransitionObserver[]): TransitionObserver {
  return {
    onTransition: (from, t, committed) => {
      for (const o of all) o.onTransition?.(from, t, committed);
    },
    onAttempt: (logic, instance, result, seconds) => {
      for (const o of all) o.onAttempt?.(logic, instance, result, seconds);
    },
    onWake: (logic, stored) => {
      for (const o of all) o.onWake?.(logic, stored);
    },
    onError: (workflowId, err) => {
      for (const o of all) o.onError?.(workflowId, err);
    },
    onLeaseLost: (workflowId, held) => {
      for (const o of all) o.onLeaseLost?.(workflowId, held);
    },
    onSlaBreached: (breach) => {
      for (const o of all) o.onSlaBreached?.(breach);
    },
    onPermits: (logic, instance, needs, wait) => {
      for (const o of all) o.onPermits?.(logic, instance, needs, wait);
    },
  };
}

/** A signing secret as configured, or a fixed development value anywhere but production. */
function secret(value: string | undefined, envVar: string, production: boolean): string {
  if (value !== undefined && value !== '') return value;
  if (production) throw new SecretMissing(envVar);
  return 'sentin8-flow-development-secret';
}
