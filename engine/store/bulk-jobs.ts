import type { BulkItem, BulkJob, JobVerb, InstanceFilter } from '../../contracts/api/bulk.ts';
import type { Client } from './tx.ts';

export interface NewBulkJob {
  env: string;
  id: string;
  verb: JobVerb;
  filter: InstanceFilter;
  args: Record<string, unknown>;
  reason: string;
  actor: string;
  workflowIds: readonly string[];
}

export async function insertBulkJob(c: Client, j: NewBulkJob): Promise<void> {
  await c.query(
    `INSERT INTO bulk_jobs (env_id, id, verb, filter, args, reason, actor, state, total)
     VALUES ($1, $2, $3, $4, $5, $6, $7, 'running', $8)`,
    [j.env, j.id, j.verb, JSON.stringify(j.filter), JSON.stringify(j.args), j.reason, j.actor, j.workflowIds.length],
  );
  await c.query(
    `INSERT INTO bulk_job_items (env_id, job_id, seq, workflow_id)
     SELECT $1, $2, s.seq, s.id FROM unnest($3::uuid[]) WITH ORDINALITY AS s(id, seq)`,
    [j.env, j.id, j.workflowIds],
  );
}

/** The next item still to run, or null when the job is finished or aborted. */
export async function nextBulkItem(c: Client, jobId: string): Promise<{ seq: number; workflowId: string } | null> {
  const res = await c.query<{ seq: number; workflow_id: string }>(
    `SELECT i.seq, i.workflow_id FROM bulk_job_items i JOIN bulk_jobs j ON j.id = i.job_id
      WHERE i.job_id = $1 AND i.status = 'pending' AND j.state = 'running' ORDER BY i.seq LIMIT 1`,
    [jobId],
  );
  const row = res.rows[0];
  return row === undefined ? null : { seq: row.seq, workflowId: row.workflow_id };
}

export async function recordBulkItem(
  c: Client,
  jobId: string,
  seq: number,
  result: { status: 'ok' | 'failed' | 'skipped'; state: string | null; error: { code: string; message: string } | null },
): Promise<void> {
  await c.query(`UPDATE bulk_job_items SET status = $3, state = $4, error = $5, finished_at = now() WHERE job_id = $1 AND seq = $2`, [
    jobId,
    seq,
    result.status,
    result.state,
    result.error === null ? null : JSON.stringify(result.error),
  ]);
}

/** Ends a job: `done` when its items ran out, `aborted` when an operator stopped it. */
export async function finishBulkJob(c: Client, jobId: string, state: 'done' | 'aborted'): Promise<boolean> {
  const res = await c.query(`UPDATE bulk_jobs SET state = $2, finished_at = now() WHERE id = $1 AND state = 'running'`, [jobId, state]);
  return (res.rowCount ?? 0) > 0;
}

/** Jobs a process left running when it stopped: the runner picks them up again. */
export async function runningBulkJobs(c: Client): Promise<{ id: string; env: string }[]> {
  const res = await c.query<{ id: string; env_id: string }>(`SELECT id, env_id FROM bulk_jobs WHERE state = 'running' ORDER BY created_at`);
  return res.rows.map((r) => ({ id: r.id, env: r.env_id }));
}

export async function loadBulkJob(c: Client, jobId: string): Promise<(BulkJob & { args: Record<string, unknown> }) | null> {
  const res = await c.query<{
    id: string;
    verb: JobVerb;
    filter: InstanceFilter;
    args: Record<string, unknown>;
    reason: string;
    actor: string;
    state: BulkJob['state'];
    total: number;
    created_at: Date;
    finished_at: Date | null;
  }>('SELECT * FROM bulk_jobs WHERE id = $1', [jobId]);
  const job = res.rows[0];
  if (job === undefined) return null;
  const items = await c.query<{ workflow_id: string; status: BulkItem['status']; state: string | null; error: BulkItem['error'] }>(
    'SELECT workflow_id, status, state, error FROM bulk_job_items WHERE job_id = $1 ORDER BY seq',
    [jobId],
  );
  const list: BulkItem[] = items.rows.map((r) => ({ workflowId: r.workflow_id, status: r.status, state: r.state, error: r.error }));
  return {
    id: job.id,
    verb: job.verb,
    filter: job.filter,
    args: job.args,
    reason: job.reason,
    actor: job.actor,
    state: job.state,
    total: job.total,
    done: list.filter((i) => i.status !== 'pending').length,
    failed: list.filter((i) => i.status === 'failed').length,
    createdAt: job.created_at.toISOString(),
    finishedAt: job.finished_at?.toISOString() ?? null,
    items: list,
  };
}
