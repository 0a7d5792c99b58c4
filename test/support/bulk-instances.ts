import type { Db } from '../../engine/store/db.ts';

/**
 * Clones parked instances in SQL, for suites that need tens of thousands of them: each clone is a
 * copy of one template instance (started through the engine) under a new id — its `workflows`
 * row, its step outputs, its step_runs and its unfired timers — with the template's id rewritten wherever the engine
 * embeds it (ctx, idempotency keys). A clone is therefore a valid instance in exactly the state the
 * engine left its template in. Runs as the connecting (owner) user, in one transaction.
 * Returns the new ids.
 */
export async function cloneInstances(db: Db, templateIds: string[], count: number): Promise<string[]> {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    const columns = async (table: string) =>
      (
        await client.query<{ c: string }>(
          `SELECT column_name AS c FROM information_schema.columns
           WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`,
          [table],
        )
      ).rows.map((r) => r.c);
    // each column copied as is, except those naming the instance (any column added later is copied too)
    const select = (cols: string[], alias: string, special: Record<string, string>) =>
      cols.map((c) => special[c] ?? `${alias}.${JSON.stringify(c)}`).join(', ');
    const list = (cols: string[]) => cols.map((c) => JSON.stringify(c)).join(', ');

    await client.query(
      `CREATE TEMP TABLE clone_map ON COMMIT DROP AS
       SELECT gen_random_uuid() AS id, t.id AS src
       FROM generate_series(0, $2::int - 1) g
       JOIN (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM workflows WHERE id = ANY($1::uuid[])) t
         ON t.k = g % $3::int`,
      [templateIds, count, templateIds.length],
    );
    const wf = await columns('workflows');
    await client.query(
      `INSERT INTO workflows (${list(wf)})
       SELECT ${select(wf, 'w', {
         id: 'm.id',
         ctx: 'replace(w.ctx::text, w.id::text, m.id::text)::jsonb',
         idempotency_key: 'NULL',
         created_at: 'now()',
         updated_at: 'now()',
       })}
       FROM clone_map m JOIN workflows w ON w.id = m.src`,
    );
    const runs = await columns('step_runs');
    await client.query(
      `INSERT INTO step_runs (${list(runs)})
       SELECT ${select(runs, 's', {
         workflow_id: 'm.id',
         idempotency_key: 'replace(s.idempotency_key, s.workflow_id::text, m.id::text)',
         // the clone's created_at: the partition its attempts belong in
         born: 'now()',
       })}
       FROM clone_map m JOIN step_runs s ON s.workflow_id = m.src`,
    );
    const outputs = await columns('workflow_outputs');
    await client.query(
      `INSERT INTO workflow_outputs (${list(outputs)})
       SELECT ${select(outputs, 'o', { workflow_id: 'm.id' })}
       FROM clone_map m JOIN workflow_outputs o ON o.workflow_id = m.src`,
    );
    const timers = await columns('timers');
    await client.query(
      `INSERT INTO timers (${list(timers)})
       SELECT ${select(timers, 't', { id: 'gen_random_uuid()', workflow_id: 'm.id' })}
       FROM clone_map m JOIN timers t ON t.workflow_id = m.src`,
    );
    const ids = (await client.query<{ id: string }>('SELECT id FROM clone_map')).rows.map((r) => r.id);
    await client.query('COMMIT');
    // fresh statistics: the tables just grew many times over
    await client.query('ANALYZE workflows, step_runs, timers');
    return ids;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}
