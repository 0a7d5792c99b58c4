import type { Client } from './tx.ts';

/** An instance's legal hold: who placed it, why, when. */
export interface LegalHold {
  actor: string;
  reason: string;
  at: Date;
}

/** Places a hold; false when the instance was held already (the first hold stands). */
export async function placeHold(c: Client, env: string, id: string, actor: string, reason: string): Promise<boolean> {
  const res = await c.query(
    'INSERT INTO legal_holds (env_id, workflow_id, actor, reason) VALUES ($1, $2, $3, $4) ON CONFLICT (workflow_id) DO NOTHING',
    [env, id, actor, reason],
  );
  return res.rowCount === 1;
}

/** Releases a hold; false when there was none. */
export async function releaseHold(c: Client, id: string): Promise<boolean> {
  return (await c.query('DELETE FROM legal_holds WHERE workflow_id = $1', [id])).rowCount === 1;
}

export async function findHold(c: Client, id: string): Promise<LegalHold | null> {
  const res = await c.query<LegalHold>('SELECT actor, reason, at FROM legal_holds WHERE workflow_id = $1', [id]);
  return res.rows[0] ?? null;
}
