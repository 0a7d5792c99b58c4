import { randomUUID } from 'node:crypto';
import { type BulkJob, type BulkPreview, BulkRequest, type BulkVerb, type JobVerb } from '../../contracts/api/bulk.ts';
import type { MigrateRequest } from '../../contracts/api/migrations.ts';
import { FlowError } from '../../contracts/errors.ts';
import type { Db } from '../store/db.ts';
import { finishBulkJob, insertBulkJob, loadBulkJob, nextBulkItem, recordBulkItem, runningBulkJobs } from '../store/bulk-jobs.ts';
import { NotFound } from '../store/errors.ts';
import { selectWorkflows } from '../store/select-workflows.ts';
import { asScheduler, inEnv } from '../store/tx.ts';
import type { Actor, Operations } from './operations.ts';

const SAMPLE = 10;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const DEFAULT_LIMIT = 1000;

/**
 * Operator verbs over every instance a filter selects, run as a server-side job: the selection is
 * fixed when the job is created (one row per instance), then each instance gets the verb in its
 * own audited transaction, exactly as one operator call would, and its result is recorded. An
 * abort stops the job before its next instance; a process that stops mid-job leaves it `running`,
 * and `resume()` in the next process finishes it.
 */
export class BulkJobs {
  readonly #running = new Map<string, Promise<void>>();
  #stopping = false;

  constructor(
    private readonly db: Db,
    private readonly ops: Operations,
    /** Told about an error that stopped a job (a store failure); the job stays `running`. */
    private readonly onError: (err: unknown) => void = () => {},
  ) {}

  /** How many instances the request would act on, and the first few. Nothing is written. */
  async preview(env: string, body: unknown): Promise<BulkPreview> {
    const req = parse(body);
    const sel = await inEnv(this.db, env, (c) => selectWorkflows(c, { ...this.ops.stuck, ...req.filter }, SAMPLE));
    return { count: Math.min(sel.count, req.limit ?? DEFAULT_LIMIT), sample: sel.rows };
  }

  /** Creates the job and starts running it; answers at once with the job as created. */
  async start(env: string, verb: BulkVerb, body: unknown, actor: Actor): Promise<BulkJob> {
    const req = parse(body);
    if (verb === 'replay' && req.step === undefined) throw new FlowError('FLOW_BULK_BAD_REQUEST', 'a bulk replay needs `step`: the step to replay from', { status: 422 });
    const id = randomUUID();
    await inEnv(this.db, env, async (c) => {
      const sel = await selectWorkflows(c, { ...this.ops.stuck, ...req.filter }, req.limit ?? DEFAULT_LIMIT);
      // the creator's scopes go with the job, so a process that resumes it acts with them, no more
      const args = {
        scopes: actor.scopes,
        ...(req.compensate === undefined ? {} : { compensate: req.compensate }),
        ...(req.step === undefined ? {} : { step: req.step }),
      };
      await insertBulkJob(c, { env, id, verb, filter: req.filter, args, reason: req.reason, actor: actor.subject, workflowIds: sel.rows.map((r) => r.id) });
    });
    this.#run(env, id, actor);
    return this.get(env, id);
  }

  /**
   * Starts the job of a migration (`POST …/migrations`): its versions and rename map checked, its
   * instances selected and fixed now, each then moved in its own audited transaction that checks
   * it again (runtime/migrations.ts).
   */
  async startMigration(env: string, req: MigrateRequest, actor: Actor): Promise<BulkJob> {
    const { args, ids } = await this.ops.migrations.select(req, actor, { env });
    const id = randomUUID();
    const filter = { ...req.filter, logicId: req.logicId, version: req.fromVersion };
    await inEnv(this.db, env, (c) =>
      insertBulkJob(c, { env, id, verb: 'migrate', filter, args: { scopes: actor.scopes, ...args }, reason: req.reason, actor: actor.subject, workflowIds: ids }),
    );
    this.#run(env, id, actor);
    return this.get(env, id);
  }

  async get(env: string, jobId: string): Promise<BulkJob> {
    if (!UUID.test(jobId)) throw new NotFound(`bulk job ${jobId}`);
    const job = await inEnv(this.db, env, (c) => loadBulkJob(c, jobId));
    if (job === null) throw new NotFound(`bulk job ${jobId}`);
    const { args: _args, ...rest } = job;
    return rest;
  }

  /** Stops the job before its next instance; the instances already done stay done. */
  async abort(env: string, jobId: string): Promise<BulkJob> {
    await inEnv(this.db, env, async (c) => {
      if ((await loadBulkJob(c, jobId)) === null) throw new NotFound(`bulk job ${jobId}`);
      await finishBulkJob(c, jobId, 'aborted');
    });
    await this.#running.get(jobId);
    return this.get(env, jobId);
  }

  /** Picks up jobs a stopped process left running, acting as the subject (and scopes) that created them. */
  async resume(): Promise<void> {
    for (const job of await asScheduler(this.db, runningBulkJobs)) {
      const stored = await inEnv(this.db, job.env, (c) => loadBulkJob(c, job.id));
      if (stored === null) continue;
      const scopes = Array.isArray(stored.args['scopes']) ? (stored.args['scopes'] as string[]) : [];
      this.#run(job.env, job.id, { subject: stored.actor, scopes });
    }
  }

  /** Resolves when every job this process runs has stopped. */
  async settled(): Promise<void> {
    while (this.#running.size > 0) await Promise.all(this.#running.values());
  }

  /** Shutdown: each job stops after its current instance and stays `running` for `resume()`. */
  async stopAll(): Promise<void> {
    this.#stopping = true;
    await this.settled();
  }

  #run(env: string, jobId: string, actor: Actor): void {
    if (this.#running.has(jobId) || this.#stopping) return;
    const done = this.#loop(env, jobId, actor).catch(this.onError).finally(() => this.#running.delete(jobId));
    this.#running.set(jobId, done);
  }

  async #loop(env: string, jobId: string, actor: Actor): Promise<void> {
    const job = await inEnv(this.db, env, (c) => loadBulkJob(c, jobId));
    if (job === null) return;
    for (;;) {
      if (this.#stopping) return;
      const item = await inEnv(this.db, env, (c) => nextBulkItem(c, jobId));
      if (item === null) break;
      const result = await this.#apply(env, job.verb, job.args, job.reason, item.workflowId, actor);
      await inEnv(this.db, env, (c) => recordBulkItem(c, jobId, item.seq, result));
    }
    await inEnv(this.db, env, (c) => finishBulkJob(c, jobId, 'done'));
  }

  async #apply(env: string, verb: JobVerb, args: Record<string, unknown>, reason: string, id: string, actor: Actor) {
    const o = { actor, reason, env };
    try {
      const record =
        verb === 'retry'
          ? await this.ops.retry(id, o)
          : verb === 'cancel'
            ? await this.ops.cancel(id, { reason, compensate: args['compensate'] === true }, o)
            : verb === 'migrate'
              ? await this.ops.migrations.apply(id, migrateArgs(args), o)
              : await this.ops.replayFrom(id, { step: String(args['step']) }, o);
      return { status: 'ok' as const, state: record.state, error: null };
    } catch (err) {
      if (!(err instanceof FlowError)) throw err;
      return { status: 'failed' as const, state: null, error: { code: err.code, message: err.message } };
    }
  }
}

/** A migration job's arguments as `startMigration` stored them. */
function migrateArgs(args: Record<string, unknown>) {
  return {
    logicId: String(args['logicId']),
    fromVersion: Number(args['fromVersion']),
    toVersion: Number(args['toVersion']),
    renames: (args['renames'] ?? {}) as Record<string, string>,
    ...(args['allowRetired'] === true ? { allowRetired: true } : {}),
  };
}

function parse(body: unknown): BulkRequest {
  const parsed = BulkRequest.safeParse(body);
  if (!parsed.success) {
    const details = parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`);
    throw new FlowError('FLOW_BULK_BAD_REQUEST', `the bulk request is invalid: ${details.join('; ')}`, { status: 422, details });
  }
  return parsed.data;
}
