import type { WorkflowRecord } from '../../contracts/index.ts';
import { OUTPUTS_OF_W, type Stored, toStored, type WorkflowRow } from './rows.ts';
import type { Db } from './db.ts';
import { BadEnvName } from './errors.ts';
import { type Client, isEnvName } from './tx.ts';

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

/**
 * The public WorkflowRecord (contracts/record.ts): the instance row plus every attempt, in order —
 * built by workflow_record() (migration 0047), which an API start also answers in its statement.
 * One statement, scoped to `env` by itself (0049): another env's instance is not found.
 */
export async function loadRecord(db: Db, env: string, id: string): Promise<WorkflowRecord | null> {
  if (!isEnvName(env)) throw new BadEnvName(env);
  const res = await db.pool.query<{ record: WorkflowRecord | null }>({ name: 'flow_workflow_record', text: 'SELECT workflow_record($1, $2) AS record', values: [id, env] });
  return res.rows[0]?.record ?? null;
}
