import type { StepAttempt, WorkflowRecord } from '../../contracts/index.ts';
import { OUTPUTS_OF_W, type Stored, toStored, type WorkflowRow } from './rows.ts';
import type { Client } from './tx.ts';

/**
 * Reads an instance; `forUpdate` locks its row until the transaction ends. The lock is NO KEY
 * UPDATE: it still serialises verbs, timers and commits on the row, but lets the foreign-key
 * checks of rows that reference it (a child's signal, an attempt row) through — FOR UPDATE
 * deadlocked a fail_fast fan-in against a child committing its ending.
 */
export async function loadWorkflow(c: Client, id: string, opts: { forUpdate?: boolean } = {}): Promise<Stored | null> {
  const res = await c.query<WorkflowRow>(`SELECT w.*, ${OUTPUTS_OF_W} FROM workflows w WHERE w.id = $1${opts.forUpdate ? ' FOR NO KEY UPDATE OF w' : ''}`, [
    id,
  ]);
  const row = res.rows[0];
  return row === undefined ? null : toStored(row);
}

interface StepRunRow {
  step: string;
  attempt: number;
  generation: number;
  kind: 'step' | 'compensation';
  state: StepAttempt['state'];
  input: unknown;
  output: unknown;
  error: StepAttempt['error'];
  idempotency_key: string | null;
  started_at: Date;
  finished_at: Date | null;
}

/**
 * The public WorkflowRecord (contracts/record.ts): the instance row plus every attempt, in order — in
 * one statement, since the API answers a record on every start and read.
 */
export async function loadRecord(c: Client, id: string): Promise<WorkflowRecord | null> {
  const wf = await c.query<
    WorkflowRow & {
      runs: (Omit<StepRunRow, 'started_at' | 'finished_at'> & { started_at: string; finished_at: string | null })[];
      attributes: Record<string, string | number> | null;
    }
  >(
    `SELECT w.*, ${OUTPUTS_OF_W}, coalesce((SELECT json_agg(r ORDER BY r.seq) FROM step_runs r WHERE r.workflow_id = w.id AND r.born = w.created_at), '[]') AS runs,
            (SELECT jsonb_object_agg(a.name, coalesce(to_jsonb(a.text_value), to_jsonb(a.num_value),
                    to_jsonb(to_char(a.time_value AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))))
               FROM workflow_attributes a WHERE a.workflow_id = w.id) AS attributes
       FROM workflows w WHERE w.id = $1`,
    [id],
  );
  const row = wf.rows[0];
  if (row === undefined) return null;
  // json_agg gives timestamps as text; read back as Dates they print exactly as the row's columns do
  const runs = { rows: row.runs.map((r): StepRunRow => ({ ...r, started_at: new Date(r.started_at), finished_at: r.finished_at === null ? null : new Date(r.finished_at) })) };
  const { instance: i } = toStored(row);
  return {
    id: i.id,
    env: i.env,
    domain: i.domain,
    logicId: i.logicId,
    version: i.version,
    logicHash: i.logicHash,
    state: i.state,
    input: i.input,
    output: i.output,
    currentStep: i.currentStep,
    error: i.error,
    generation: i.generation,
    correlationId: i.correlationId,
    parentId: i.parentId,
    branchIndex: i.branchIndex,
    createdAt: row.created_at.toISOString(),
    updatedAt: row.updated_at.toISOString(),
    steps: runs.rows.map((r) => ({
      step: r.step,
      kind: r.kind,
      attempt: r.attempt,
      generation: r.generation,
      state: r.state,
      input: r.input,
      output: r.output,
      error: r.error,
      idempotencyKey: r.idempotency_key,
      startedAt: r.started_at.toISOString(),
      finishedAt: r.finished_at?.toISOString() ?? null,
    })),
    compensations: i.ctx.compensations.map((r) => ({ step: r.step, generation: r.generation, state: r.state, attempts: r.attempts, error: r.error })),
    ...(row.attributes === null ? {} : { attributes: row.attributes }),
  };
}
