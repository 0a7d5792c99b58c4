-- 0054: a lease has ended at its expiry, not a tick after it.
--
-- Why: whoever lets a lease go, or wakes an instance for a claim to take (a permit waiter given
-- room, a timer fired, a lease let lapse), sets lease_expires_at = now(). A claim took an instance
-- only once lease_expires_at < statement_timestamp(): in the very instant of the wake-up, not yet.
-- On Postgres that instant is a microsecond; PGlite's clock counts milliseconds, and a claim rung
-- by the wake-up's own notice often ran within the same one. It found nothing, and nothing rang
-- again: the woken instance waited for the next poll (an hour in a test that polls that seldom).
--
-- Now a claim takes an instance whose lease expires at or before its statement's time. That is
-- the boundary the rest of the store already used: a lease is held while lease_expires_at > now().

CREATE OR REPLACE FUNCTION claim_workflows(lim integer, lease_ms float8, weights jsonb DEFAULT '{}', envs text[] DEFAULT NULL) RETURNS TABLE (wf workflows, outputs jsonb)
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
        AND (w.lease_expires_at IS NULL OR w.lease_expires_at <= statement_timestamp())
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
      AND w.state = 'processing' AND w.lease_token IS NULL AND w.lease_expires_at <= statement_timestamp()
    ORDER BY w.lease_expires_at LIMIT lim
    FOR NO KEY UPDATE SKIP LOCKED
  ), orphaned AS (
    SELECT id FROM workflows
    WHERE state = 'processing' AND lease_expires_at <= statement_timestamp()
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
