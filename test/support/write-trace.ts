import type { Db } from '../../engine/store/db.ts';

export interface TracedWrite {
  n: number;
  /** The application_name of the connection (set PGAPPNAME on a worker process to tell it apart). */
  app: string;
  /** Which engine statement it was, from its text. */
  statement: 'commit' | 'claim' | 'heartbeat' | 'other';
  /** Rows the statement changed: 0 for a write that was fenced out. */
  rows: number;
  ids: string[];
}

/**
 * Records every statement that updates `workflows` in the test schema — including those that match
 * no row, which leave no other trace — with who ran it and how many rows it changed. A statement
 * trigger fires even for zero rows; the transition table counts them.
 */
export async function traceWorkflowWrites(db: Db): Promise<void> {
  await db.pool.query(`
    CREATE TABLE test_workflow_writes (n bigserial PRIMARY KEY, app text NOT NULL, query text NOT NULL, rows int NOT NULL, ids uuid[] NOT NULL);
    CREATE FUNCTION test_trace_workflow_writes() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = ${db.schema} AS $$
    BEGIN
      INSERT INTO test_workflow_writes (app, query, rows, ids)
      SELECT current_setting('application_name'), current_query(), count(*), coalesce(array_agg(id), '{}') FROM changed;
      RETURN NULL;
    END $$;
    CREATE TRIGGER test_trace_workflow_writes AFTER UPDATE ON workflows
      REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION test_trace_workflow_writes();`);
}

export async function tracedWrites(db: Db, opts: { after?: number; app?: string } = {}): Promise<TracedWrite[]> {
  const res = await db.pool.query<{ n: string; app: string; query: string; rows: number; ids: string[] }>(
    'SELECT n, app, query, rows, ids FROM test_workflow_writes WHERE n > $1 AND ($2::text IS NULL OR app = $2) ORDER BY n',
    [opts.after ?? 0, opts.app ?? null],
  );
  return res.rows.map((r) => ({ n: Number(r.n), app: r.app, statement: statementOf(r.query), rows: r.rows, ids: r.ids }));
}

export async function lastTracedWrite(db: Db): Promise<number> {
  const res = await db.pool.query<{ n: string | null }>('SELECT max(n) AS n FROM test_workflow_writes');
  return Number(res.rows[0]?.n ?? 0);
}

/** Recognises the engine's statements by their text (engine/store/*.ts: commit-transition, claim-workflows). */
function statementOf(query: string): TracedWrite['statement'] {
  if (/commit_(transition|journaled|batch)\(|AND row_version = \$2/.test(query)) return 'commit';
  if (/FOR UPDATE SKIP LOCKED|claim_workflows\(/.test(query)) return 'claim';
  if (/SET lease_expires_at = /.test(query)) return 'heartbeat';
  return 'other';
}
