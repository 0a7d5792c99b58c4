import type { Client } from './tx.ts';

/** A recorded SLA breach (migration 0031); `step` null: the instance's own SLA. */
export interface SlaBreach {
  id: string;
  logicId: string;
  step: string | null;
  within: string;
  breachedAt: string;
}

/** How many SLA breaches the caller's env has recorded, and the latest `limit` of them. */
export async function readSlaBreaches(c: Client, limit = 50): Promise<{ count: number; recent: SlaBreach[] }> {
  const count = await c.query<{ n: number }>('SELECT count(*)::int AS n FROM sla_breaches');
  const recent = await c.query<{ workflow_id: string; logic_id: string; step: string; within: string; breached_at: Date }>(
    'SELECT workflow_id, logic_id, step, within, breached_at FROM sla_breaches ORDER BY breached_at DESC LIMIT $1',
    [limit],
  );
  return {
    count: count.rows[0]?.n ?? 0,
    recent: recent.rows.map((r) => ({ id: r.workflow_id, logicId: r.logic_id, step: r.step === '' ? null : r.step, within: r.within, breachedAt: r.breached_at.toISOString() })),
  };
}
