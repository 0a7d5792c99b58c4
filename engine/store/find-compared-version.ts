import type { LogicVersion } from '../../contracts/index.ts';
import type { Client } from './tx.ts';

/**
 * The version a candidate is checked against: the one named, or else the highest active version
 * below the candidate's (the one its new instances would replace). Null when there is none.
 */
export async function findComparedVersion(c: Client, logicId: string, candidate: number, named?: number): Promise<LogicVersion | null> {
  const res =
    named === undefined
      ? await c.query<{ doc: LogicVersion }>(
          'SELECT doc FROM logic_versions WHERE logic_id = $1 AND version < $2 AND active ORDER BY version DESC LIMIT 1',
          [logicId, candidate],
        )
      : await c.query<{ doc: LogicVersion }>('SELECT doc FROM logic_versions WHERE logic_id = $1 AND version = $2', [logicId, named]);
  return res.rows[0]?.doc ?? null;
}
