/**
 * `sentin8-flow/client`: a small typed HTTP client for owning services and CI, typed from the
 * same zod contracts that the engine's API validates with (ARCHITECTURE.md, Contracts: HTTP API).
 *
 * ```ts
 * const flow = createFlowClient({ baseUrl: 'https://engine.internal', token: process.env.FLOW_TOKEN, env: 'payments' });
 * const run = await flow.start({ logicId: 'payments.capture', input }, { idempotencyKey: paymentId });
 * await flow.completeCallback(resumeToken, { output: { captureId } });
 * ```
 */
import { context, propagation } from '@opentelemetry/api';
import type { CallbackRequest, CallbackResponse } from '../contracts/api/callbacks.ts';
import type { DecisionRequest } from '../contracts/api/decisions.ts';
import type { MessageAnswer } from '../contracts/api/messages.ts';
import type { IngestEventBody, IngestEventResponse } from '../contracts/api/events.ts';
import type { CompatibilityReport } from '../contracts/api/compatibility.ts';
import type { BulkJob } from '../contracts/api/bulk.ts';
import type { MigrateRequest, MigrationPreview } from '../contracts/api/migrations.ts';
import type { HandlerUsageList } from '../contracts/api/handlers.ts';
import type { PublishVersionResponse, VersionList, VersionSummary } from '../contracts/api/logic-versions.ts';
import type { Problem } from '../contracts/api/problem.ts';
import type { StartWorkflowBody } from '../contracts/api/workflows.ts';
import { FlowError } from '../contracts/errors.ts';
import type { WorkflowRecord } from '../contracts/record.ts';

export type {
  CallbackRequest,
  CallbackResponse,
  DecisionRequest,
  IngestEventBody,
  IngestEventResponse,
  PublishVersionResponse,
  Problem,
  StartWorkflowBody,
  VersionSummary,
  WorkflowRecord,
};

export interface FlowClientOptions {
  /** The engine's base URL, e.g. `https://engine.internal/`. */
  baseUrl: string;
  /** A bearer JWT; not needed for `completeCallback`, where the resume token authenticates. */
  token?: string;
  /** The env every call acts in. (Default: `default`) */
  env?: string;
  /** (Default: the global fetch) */
  fetch?: typeof fetch;
}

/** The engine answered with a problem (`code` is its stable FLOW_… code), or not at all. */
export class FlowApiError extends FlowError {
  readonly problem: Problem | null;
  constructor(status: number, problem: Problem | null, fallback: string) {
    super(problem?.code ?? 'FLOW_CLIENT_BAD_RESPONSE', problem?.detail ?? fallback, { status, details: problem?.errors });
    this.name = 'FlowApiError';
    this.problem = problem;
  }
}

export interface FlowClient {
  /** Starts a workflow; `created` is false when the idempotency key replayed an earlier start. */
  start(body: StartWorkflowBody, opts?: { idempotencyKey?: string }): Promise<{ record: WorkflowRecord; created: boolean }>;
  get(id: string): Promise<WorkflowRecord>;
  /** Completes a step the service answered `202 {"status":"waiting"}`, with its X-Flow-Resume-Token. */
  completeCallback(resumeToken: string, body: CallbackRequest): Promise<CallbackResponse>;
  decide(id: string, step: string, body: DecisionRequest): Promise<WorkflowRecord>;
  /**
   * Sends message `name` to an instance (docs/messages.md): `delivered` to the waitFor step it is
   * parked on, or `buffered` until it reaches one. A repeat of `idempotencyKey` gets the first answer.
   */
  sendMessage(id: string, name: string, payload: unknown, opts: { idempotencyKey: string }): Promise<MessageAnswer>;
  ingestEvent(body: IngestEventBody): Promise<IngestEventResponse>;
  /** Publishes a LogicVersion with its modules (sha256 hex → bytes); `unchanged` when already there. */
  publishVersion(logicVersion: object, modules?: Record<string, Uint8Array>): Promise<PublishVersionResponse>;
  /** Every published version in the env, with its active flag and in-flight count. */
  listVersions(): Promise<VersionSummary[]>;
  /** Retires (`false`: new starts refused, running instances finish) or reactivates (`true`) a version. */
  setVersionActive(logicId: string, version: number, active: boolean): Promise<VersionSummary>;
  /** Every handler profile and path the env's versions call, and whether each may be turned off now. */
  handlerUsage(filter?: { handler?: string; path?: string }): Promise<HandlerUsageList>;
  /**
   * The compatibility report of a candidate version (nothing is published) against the live
   * instances of `against` (default: the highest active version below it); with `replay`, the
   * last ended instances of it replayed on the candidate too.
   */
  checkCompatibility(logicVersion: { logicId: string }, opts?: { against?: number; replay?: number }): Promise<CompatibilityReport>;
  /**
   * The dry run of a migration (docs/versions.md, "Migrating instances"): per group of selected
   * instances of `fromVersion` of one shape, and per instance of one page (`after`, `pageSize`),
   * where it would land on `toVersion`, what would run next under which keys, or why it stays.
   * Nothing changes.
   */
  previewMigration(req: Omit<MigrateRequest, 'dryRun'>): Promise<MigrationPreview>;
  /** Starts the migration's server-side bulk job; follow it with `bulkJob(id)`. */
  startMigration(req: Omit<MigrateRequest, 'dryRun'>): Promise<BulkJob>;
  /** A bulk job (a migration's, a bulk verb's): its progress and each instance's result. */
  bulkJob(jobId: string): Promise<BulkJob>;
}

/**
 * The W3C trace context of the caller's active span (`traceparent`, `tracestate`), through the
 * propagator the caller's OpenTelemetry SDK registered: a start continues the caller's trace, and
 * a decision links to it. Empty when the caller registered none.
 */
function traceHeaders(): Record<string, string> {
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return carrier;
}

export function createFlowClient(opts: FlowClientOptions): FlowClient {
  const base = opts.baseUrl.replace(/\/+$/, '');
  const env = encodeURIComponent(opts.env ?? 'default');
  const doFetch = opts.fetch ?? fetch;

  async function call<T>(method: string, path: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: T }> {
    let res: Response;
    try {
      res = await doFetch(`${base}${path}`, {
        method,
        headers: {
          ...traceHeaders(),
          accept: 'application/json, application/problem+json',
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}),
          ...headers,
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    } catch (err) {
      throw new FlowError('FLOW_CLIENT_UNREACHABLE', `${method} ${base}${path}: ${(err as Error).message}`, { status: 503, cause: err });
    }
    const text = await res.text();
    let parsed: unknown = null;
    try {
      parsed = text === '' ? null : JSON.parse(text);
    } catch {}
    if (!res.ok) {
      const problem = parsed !== null && typeof (parsed as Problem).code === 'string' ? (parsed as Problem) : null;
      throw new FlowApiError(res.status, problem, `${method} ${path} answered ${res.status}: ${text.slice(0, 300)}`);
    }
    return { status: res.status, body: parsed as T };
  }

  return {
    async start(body, o = {}) {
      const r = await call<WorkflowRecord>('POST', `/v1/envs/${env}/workflows`, body, o.idempotencyKey ? { 'idempotency-key': o.idempotencyKey } : {});
      return { record: r.body, created: r.status === 201 };
    },
    async get(id) {
      return (await call<WorkflowRecord>('GET', `/v1/envs/${env}/workflows/${encodeURIComponent(id)}`, undefined)).body;
    },
    async completeCallback(resumeToken, body) {
      return (await call<CallbackResponse>('POST', `/v1/callbacks/${encodeURIComponent(resumeToken)}`, body)).body;
    },
    async decide(id, step, body) {
      return (await call<WorkflowRecord>('POST', `/v1/envs/${env}/workflows/${encodeURIComponent(id)}/decisions/${encodeURIComponent(step)}`, body)).body;
    },
    async sendMessage(id, name, payload, o) {
      const path = `/v1/envs/${env}/workflows/${encodeURIComponent(id)}/messages/${encodeURIComponent(name)}`;
      return (await call<MessageAnswer>('POST', path, payload ?? null, { 'idempotency-key': o.idempotencyKey })).body;
    },
    async ingestEvent(body) {
      return (await call<IngestEventResponse>('POST', `/v1/envs/${env}/events`, body)).body;
    },
    async publishVersion(logicVersion, modules = {}) {
      const encoded = Object.fromEntries(Object.entries(modules).map(([sha, bytes]) => [sha, Buffer.from(bytes).toString('base64')]));
      const body = { logicVersion, ...(Object.keys(encoded).length > 0 ? { modules: encoded } : {}) };
      return (await call<PublishVersionResponse>('POST', `/v1/envs/${env}/logic-versions`, body)).body;
    },
    async listVersions() {
      return (await call<VersionList>('GET', `/v1/envs/${env}/logic-versions`, undefined)).body.items;
    },
    async setVersionActive(logicId, version, active) {
      const path = `/v1/envs/${env}/logic-versions/${encodeURIComponent(logicId)}/${version}`;
      return (await call<VersionSummary>('PATCH', path, { active })).body;
    },
    async handlerUsage(filter = {}) {
      const q = new URLSearchParams(Object.entries(filter).filter((e): e is [string, string] => e[1] !== undefined));
      return (await call<HandlerUsageList>('GET', `/v1/envs/${env}/handlers${q.size > 0 ? `?${q}` : ''}`, undefined)).body;
    },
    async previewMigration(req) {
      return (await call<MigrationPreview>('POST', `/v1/envs/${env}/migrations`, { ...req, dryRun: true })).body;
    },
    async startMigration(req) {
      return (await call<BulkJob>('POST', `/v1/envs/${env}/migrations`, req)).body;
    },
    async bulkJob(jobId) {
      return (await call<BulkJob>('GET', `/v1/envs/${env}/bulk/${encodeURIComponent(jobId)}`, undefined)).body;
    },
    async checkCompatibility(logicVersion, opts = {}) {
      const body = { logicVersion, ...opts };
      const path = `/v1/envs/${env}/logic-versions/${encodeURIComponent(logicVersion.logicId)}/compatibility`;
      return (await call<CompatibilityReport>('POST', path, body)).body;
    },
  };
}
