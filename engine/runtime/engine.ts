import {
  CreateWorkflowRequest,
  parseLogicVersion,
  type StepOutcome,
  TERMINAL_STATES,
  type WorkflowRecord,
} from '../../contracts/index.ts';
import { BadRequest, CallbackNotAllowed, ChildLogicMissing, SecretMissing } from '../errors.ts';
import { parseAllowlist, hostAllowed } from '../executors/allowlist.ts';
import { createExecutors, type ExecutorOptions } from '../executors/index.ts';
import type { Db } from '../store/db.ts';
import { NotFound } from '../store/errors.ts';
import { loadRecord } from '../store/load-workflow.ts';
import { findLogicVersion, publishLogicVersion } from '../store/logic-versions.ts';
import { asScheduler, inEnv } from '../store/tx.ts';
import { LogicCache } from './logic-cache.ts';
import { mutateWorkflow } from './mutate.ts';
import { Operations } from './operations.ts';
import { ResumeTokens } from './resume-tokens.ts';
import { IngestEventRequest, type IngestResult, ingestEvent } from './ingest-event.ts';
import { OutboxRelay, type RelayTuning } from './outbox-relay.ts';
import { startPinned } from './start-instance.ts';
import { envOfWorkflow } from '../store/audit.ts';
import type { ResumeArgs } from '../core/wake.ts';
import type { TransitionObserver } from './observer.ts';
import { type WorkerOptions, WorkerPool } from './worker-pool.ts';

export interface EngineOptions {
  db: Db;
  /** The environment used when a request names none. (Default: `default`) */
  env?: string;
  executors?: ExecutorOptions;
  worker?: WorkerOptions;
  observer?: TransitionObserver;
  /**
   * Signs resume tokens; every engine process of a deployment needs the same. (Default:
   * FLOW_TOKEN_SECRET; outside production a fixed development secret, in production none: the
   * engine refuses to start with FLOW_SECRET_MISSING)
   */
  tokenSecret?: string;
  /**
   * Hosts a start request's `callback.url` may name (`host`, `host:port`, `*`); any other is
   * refused, so a caller cannot point the engine at internal services. (Default:
   * FLOW_CALLBACK_ALLOWLIST, comma-separated; none: callbacks are refused)
   */
  callbackAllowlist?: readonly string[];
  /** Where the outbox relay POSTs `emit` events. (Default: FLOW_EVENT_SINK_URL; none: they wait) */
  eventSink?: { url: string };
  /** Signs outbox deliveries (X-Flow-Signature); receivers verify with it. (Default: FLOW_OUTBOX_SECRET, as tokenSecret) */
  outboxSecret?: string;
  relay?: RelayTuning;
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
  /** Delivers outbox rows (events, callbacks); runs with the workers, or by hand with relayOnce(). */
  readonly outbox: OutboxRelay;
  readonly #callbackHosts: ReadonlySet<string>;

  constructor(opts: EngineOptions) {
    this.db = opts.db;
    this.env = opts.env ?? 'default';
    this.logics = new LogicCache(opts.db);
    this.tokens = new ResumeTokens(secret(opts.tokenSecret ?? process.env['FLOW_TOKEN_SECRET'], 'FLOW_TOKEN_SECRET'));
    this.#callbackHosts = new Set(opts.callbackAllowlist ?? parseAllowlist(process.env['FLOW_CALLBACK_ALLOWLIST']));
    const executors = createExecutors(opts.executors);
    this.workers = new WorkerPool(opts.db, this.logics, executors, this.tokens, opts.observer ?? {}, opts.worker);
    this.ops = new Operations(opts.db, this.logics, this.env, (id, env) => {
      this.workers.wake();
      return this.get(id, env);
    });
    const sinkUrl = opts.eventSink?.url ?? process.env['FLOW_EVENT_SINK_URL'];
    this.outbox = new OutboxRelay(opts.db, {
      ...opts.relay,
      secret: secret(opts.outboxSecret ?? process.env['FLOW_OUTBOX_SECRET'], 'FLOW_OUTBOX_SECRET'),
      eventSink: sinkUrl ? { url: sinkUrl } : null,
      onError: (err) => opts.observer?.onError?.(null, err),
    });
    this.workers.attach(this.outbox);
  }

  /** An approver answers the decision the instance is parked on (DESIGN.md §5 `resume`). */
  async resume(id: string, args: ResumeArgs, opts: { env?: string; reason?: string } = {}): Promise<WorkflowRecord> {
    const env = opts.env ?? this.env;
    await mutateWorkflow(this.db, this.logics, env, id, { type: 'resume', args }, {
      verb: 'resume',
      actor: args.approver.subject,
      reason: opts.reason ?? null,
      args: { step: args.step, option: args.option, payload: args.payload ?? null, scopes: args.approver.scopes },
    });
    this.workers.wake();
    return this.get(id, env);
  }

  /**
   * The owning service completes a step it answered with 202 waiting. The token names the
   * instance and attempt; the env is read from the instance, never from the caller.
   */
  async complete(token: string, body: { output?: unknown; error?: { code: string; message: string }; retryable?: boolean }): Promise<WorkflowRecord> {
    const { workflowId, seq } = this.tokens.verify(token);
    const env = await asScheduler(this.db, (c) => envOfWorkflow(c, workflowId));
    if (env === null) throw new NotFound(`workflow ${workflowId}`);
    const outcome: StepOutcome =
      body.error !== undefined
        ? { status: 'failed', retryable: body.retryable ?? false, error: body.error }
        : { status: 'succeeded', output: body.output ?? null };
    await mutateWorkflow(this.db, this.logics, env, workflowId, { type: 'callback', seq, outcome });
    this.workers.wake();
    return this.get(workflowId, env);
  }

  /**
   * Validates and publishes a LogicVersion; true when it was new. The workflows its `children`
   * steps start must be published first, so a spawn can never name a missing definition.
   */
  async publish(doc: unknown, env = this.env): Promise<boolean> {
    const logic = parseLogicVersion(doc);
    const published = await inEnv(this.db, env, async (c) => {
      for (const [name, step] of Object.entries(logic.steps)) {
        if (step.kind === 'children' && (await findLogicVersion(c, step.logicId, step.version)) === null) {
          throw new ChildLogicMissing(logic, name, step.logicId, step.version);
        }
      }
      return publishLogicVersion(c, env, logic);
    });
    this.logics.remember(logic);
    return published;
  }

  /**
   * Starts an instance pinned to the requested version (or the active one), with its first step
   * already prepared. The same idempotency key returns the first instance instead. An optional
   * `callback: { url }` receives a notification on every transition into a terminal state.
   */
  async start(request: unknown): Promise<{ id: string; created: boolean }> {
    const parsed = CreateWorkflowRequest.safeParse(request);
    if (!parsed.success) {
      throw new BadRequest('the start request', parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`));
    }
    const req = parsed.data;
    const callback = req.callback === undefined ? null : new URL(req.callback.url);
    if (callback !== null && !hostAllowed(this.#callbackHosts, callback)) throw new CallbackNotAllowed(callback.host);
    const env = req.env ?? this.env;
    const result = await inEnv(this.db, env, async (c) => {
      const logic = await findLogicVersion(c, req.logicId, req.version);
      if (logic === null) throw new NotFound(`LogicVersion ${req.logicId}${req.version ? `@${req.version}` : ''}`);
      return startPinned(c, this.logics, logic, {
        env,
        input: req.input,
        correlationId: req.correlationId ?? null,
        idempotencyKey: req.idempotencyKey ?? null,
        callbackUrl: req.callback?.url ?? null,
      });
    });
    this.workers.wake();
    return result;
  }

  /**
   * Records an event and starts one instance per trigger on its type, pinned to the version active
   * now, in one transaction. A repeated idempotency key starts nothing and returns the first ids.
   */
  async ingestEvent(event: unknown): Promise<IngestResult> {
    const parsed = IngestEventRequest.safeParse(event);
    if (!parsed.success) {
      throw new BadRequest('the event', parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`));
    }
    const env = parsed.data.env ?? this.env;
    const result = await inEnv(this.db, env, (c) => ingestEvent(c, this.logics, env, parsed.data));
    if (result.created && result.ids.length > 0) this.workers.wake();
    return result;
  }

  async get(id: string, env = this.env): Promise<WorkflowRecord> {
    const record = await inEnv(this.db, env, (c) => loadRecord(c, id));
    if (record === null) throw new NotFound(`workflow ${id}`);
    return record;
  }

  /**
   * Resolves once the instance is terminal or parked (`waiting`) on something other than its own
   * children — those this engine's workers run on — polling the store.
   */
  async settled(id: string, env = this.env, pollMs = 20): Promise<WorkflowRecord> {
    for (;;) {
      const record = await this.get(id, env);
      if (TERMINAL_STATES.has(record.state as never)) return record;
      if (record.state === 'waiting') {
        const logic = await this.logics.get(env, record.logicHash);
        if (logic.steps[record.currentStep ?? '']?.kind !== 'children') return record;
      }
      await new Promise((r) => setTimeout(r, pollMs));
    }
  }

  async close(): Promise<void> {
    await this.workers.stop();
  }
}

/** A signing secret as configured, or a fixed development value anywhere but production. */
function secret(value: string | undefined, envVar: string): string {
  if (value !== undefined && value !== '') return value;
  if (process.env['NODE_ENV'] === 'production') throw new SecretMissing(envVar);
  return 'sentin8-flow-development-secret';
}
