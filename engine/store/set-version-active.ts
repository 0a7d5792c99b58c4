import type { Client } from './tx.ts';

/** Retires (false) or reactivates (true) a version of the caller's env; false when there is none. */
export async function setVersionActive(c: Client, logicId: string, version: number, active: boolean): Promise<boolean> {
  const res = await c.query('UPDATE logic_versions SET active = $3 WHERE logic_id = $1 AND version = $2', [logicId, version, active]);
  return res.rowCount === 1;
}
