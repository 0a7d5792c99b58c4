import type { VouchEntry } from '../../contracts/grants.ts';
import type { LogicVersion } from '../../contracts/index.ts';
import { TERMINAL_STATES } from '../../contracts/states.ts';
import type { RouteMatch } from '../core/event-routes.ts';
import type { Client } from './tx.ts';

const TERMINAL = `(${[...TERMINAL_STATES].map((st) => `'${st}'`).join(', ')})`;
const COLUMN = { string: 'text_value', number: 'num_value', time: 'time_value' } as const;

/**
 * The versions of `logicId` in the caller's env (active or retired: a retired version's running
 * instances still take messages) whose document has a trigger on `type`, with the grants that
 * vouched for each. The caller keeps those whose trigger is a message trigger.
 */
export async function versionsTriggeredBy(c: Client, logicId: string, type: string): Promise<{ doc: LogicVersion; grants: VouchEntry[] }[]> {
  const res = await c.query<{ doc: LogicVersion; grants: VouchEntry[] }>(
    `SELECT doc, grants FROM logic_versions
      WHERE logic_id = $1 AND doc->'triggers' @> jsonb_build_array(jsonb_build_object('event', $2::text))
      ORDER BY version`,
    [logicId, type],
  );
  return res.rows;
}

/**
 * The live instances of (logicId, version) in the caller's env that a route's match selects, in
 * id order (the order their row locks are then taken in, so two events never deadlock), at most
 * `limit`. By correlationId: a range scan of workflows_correlation (migration 0036). By attribute:
 * a range scan of the attribute's typed index (migration 0031), compared in the column of its type.
 */
export async function correlatedInstances(c: Client, at: { logicId: string; version: number; match: RouteMatch; limit: number }): Promise<string[]> {
  const { logicId, version, match, limit } = at;
  const res =
    'correlationId' in match
      ? await c.query<{ id: string }>(
          `SELECT id FROM workflows
            WHERE logic_id = $1 AND correlation_id = $2 AND version = $3 AND state NOT IN ${TERMINAL}
            ORDER BY id LIMIT $4`,
          [logicId, match.correlationId, version, limit],
        )
      : await c.query<{ id: string }>(
          `SELECT w.id FROM workflow_attributes a JOIN workflows w ON w.id = a.workflow_id
            WHERE a.name = $1 AND a.${COLUMN[match.type]} = $2${match.type === 'number' ? '::float8' : match.type === 'time' ? '::timestamptz' : ''}
              AND w.logic_id = $3 AND w.version = $4 AND w.state NOT IN ${TERMINAL}
            ORDER BY w.id LIMIT $5`,
          [match.attribute, match.value, logicId, version, limit],
        );
  return res.rows.map((r) => r.id);
}
