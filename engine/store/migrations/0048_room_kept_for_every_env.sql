-- 0048: a claim for the envs a full pool holds nothing of.
--
-- Why: an engine claims only while it holds fewer instances than its concurrency, and a worker
-- that commits a step goes on with the same instance's next step under the same lease. So while
-- env A's backlog filled a pool, a start in env B waited until one of A's held instances parked or
-- ended (up to a whole workflow), though the executors would run B's call at once (an env holding
-- no executor takes one over the bound). With 2,000 of A's instances started at once, B's
-- start-to-first-call p99 was 60.7 ms against 7.7 ms idle; with two modules spinning, 145.9 ms.
--
-- Now claim_workflows() takes `envs`: when set, it claims only instances of those envs. A pool
-- that is full and learns of a start in an env it holds nothing of claims for that env alone,
-- one instance an env, over its bound: room kept for every env, not a share of the pool.
-- Called without `envs` (an engine of an earlier version) it claims as before.

DROP FUNCTION claim_workflows(integer, float8, jsonb);

CREATE FUNCTION claim_workflows(lim integer, lease_ms float8, weights jsonb DEFAULT '{}', envs text[] DEFAULT NULL) RETURNS TABLE (wf workflows, outputs jsonb)
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role  text := current_setting('role');
  taken_rows workflows[];
BEGIN
  PERFORM set_config('role', 'flow_engine', true);
  WITH RECURSIVE lanes AS (
    -- each (env, priority) with a runnable instance, due or not: one index probe per pair
    (SELECT env_id, priority FROM workflows
     WHERE (state IN ('pending', 'compensating') OR (state = 'waiting' AND wakes IS NOT NULL))
       AND (envs IS NULL OR env_id = ANY(envs))
     ORDER BY env_id, priority LIMIT 1)
    UNION ALL
    SELECT n.env_id, n.priority FROM lanes l CROSS JOIN LATERAL (
      SELECT w.env_id, w.priority FROM workflows w
      WHERE (w.state IN ('pending', 'compensating') OR (w.state = 'waiting' AND w.wakes IS NOT NULL))
        AND (w.env_id, w.priority) > (l.env_id, l.priority)
        AND (envs IS NULL OR w.env_id = ANY(envs))
      ORDER BY w.env_id, w.priority LIMIT 1
    ) n
  ), due AS (
    -- each lane's first `lim` due instances nobody holds; the env's highest priority first
    SELECT d.id, d.run_at, l.env_id, l.priority FROM lanes l CROSS JOIN LATERAL (
      SELECT w.id, w.run_at FROM workflows w
      WHERE w.env_id = l.env_id AND w.priority = l.priority
        AND (w.state IN ('pending', 'compensating') OR (w.state = 'waiting' AND w.wakes IS NOT NULL))
        AND w.run_at <= statement_timestamp()
        AND (w.lease_expires_at IS NULL OR w.lease_expires_at < statement_timestamp())
      ORDER BY w.run_at LIMIT lim
      FOR NO KEY UPDATE SKIP LOCKED
    ) d
  ), turns AS (
    SELECT id, run_at, priority,
           ceil(row_number() OVER (PARTITION BY env_id ORDER BY priority DESC, run_at)
                / greatest(coalesce((weights->>env_id)::float8, 1), 1)) AS turn
    FROM due
  ), runnable AS (
    SELECT id FROM turns ORDER BY turn, priority DESC, run_at LIMIT lim
  ), turned AS (
    -- waiters woken for room kept for them (0027, 0033)
    SELECT w.id FROM workflows w
    WHERE w.id IN (SELECT q.workflow_id FROM permit_waiters q WHERE q.kind = 'concurrency' AND q.woken_at IS NOT NULL)
      AND (envs IS NULL OR w.env_id = ANY(envs))
      AND w.state = 'processing' AND w.lease_token IS NULL AND w.lease_expires_at < statement_timestamp()
    ORDER BY w.lease_expires_at LIMIT lim
    FOR NO KEY UPDATE SKIP LOCKED
  ), orphaned AS (
    SELECT id FROM workflows
    WHERE state = 'processing' AND lease_expires_at < statement_timestamp()
      AND (envs IS NULL OR env_id = ANY(envs))
    ORDER BY lease_expires_at LIMIT lim
    FOR NO KEY UPDATE SKIP LOCKED
  ), claimed AS (
    -- waiters woken for room, then newcomers, then lapsed leases (a waiter taken
    -- first may come again from `orphaned`: the UPDATE takes it once)
    SELECT id FROM turned UNION ALL SELECT id FROM runnable UNION ALL SELECT id FROM orphaned LIMIT lim
  ), taken AS (
    UPDATE workflows w
    SET state = CASE WHEN w.state IN ('compensating', 'waiting') THEN w.state ELSE 'processing' END,
        lease_token = gen_random_uuid(),
        lease_expires_at = now() + lease_ms * interval '1 millisecond',
        row_version = w.row_version + 1
    FROM claimed WHERE w.id = claimed.id
    RETURNING w AS claimed_row
  )
  SELECT array_agg(t.claimed_row) FROM taken t INTO taken_rows;
  -- an empty claim (an idle pool's) plans no lookup
  IF taken_rows IS NOT NULL THEN
    RETURN QUERY SELECT * FROM with_outputs(taken_rows);
  END IF;
  PERFORM set_config('role', prev_role, true);
END
$fn$;

GRANT EXECUTE ON FUNCTION claim_workflows(integer, float8, jsonb, text[]) TO flow_app, flow_engine;
