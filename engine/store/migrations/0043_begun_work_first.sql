-- 0043: a claim takes work already begun before newcomers.
--
-- Why: a claim filled itself with due pending instances first and took the rest from instances
-- whose lease had run out. An instance waiting for a limit is one of those: acquire_permits()
-- lets its lease go with `lease_expires_at` set to when its token exists (or 'infinity'), and
-- wake_permit_waiters() sets it to now when room frees. So while a backlog of new instances was
-- due, every claim was full of newcomers, and a waiter woken for room it had been promised sat
-- behind the whole backlog: with a cap of 8 and 10,000 instances started at once, the service
-- saw 30 calls a second instead of hundreds; under a rate limit, waiters due on their turn were
-- claimed in clumps after the backlog had been moved into the line, and the bucket filled up to
-- its burst in between. An instance whose holder died waited behind the backlog the same way.
--
-- Now the claim takes those first, oldest lapse first, and fills the rest with due instances in
-- priority and env turns as before. What it can take first is bounded: waiters are woken only
-- as room and tokens allow, and dead holders only leave what they held.

CREATE OR REPLACE FUNCTION claim_workflows(lim integer, lease_ms float8, weights jsonb DEFAULT '{}') RETURNS TABLE (wf workflows, outputs jsonb)
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role  text := current_setting('role');
  taken_rows workflows[];
BEGIN
  PERFORM set_config('role', 'flow_engine', true);
  WITH RECURSIVE lanes AS (
    -- each (env, priority) with a runnable instance, due or not: one index probe per pair
    (SELECT env_id, priority FROM workflows
     WHERE state IN ('pending', 'compensating') OR (state = 'waiting' AND wakes IS NOT NULL)
     ORDER BY env_id, priority LIMIT 1)
    UNION ALL
    SELECT n.env_id, n.priority FROM lanes l CROSS JOIN LATERAL (
      SELECT w.env_id, w.priority FROM workflows w
      WHERE (w.state IN ('pending', 'compensating') OR (w.state = 'waiting' AND w.wakes IS NOT NULL))
        AND (w.env_id, w.priority) > (l.env_id, l.priority)
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
  ), orphaned AS (
    SELECT id FROM workflows
    WHERE state = 'processing' AND lease_expires_at < statement_timestamp()
    ORDER BY lease_expires_at LIMIT lim
    FOR NO KEY UPDATE SKIP LOCKED
  ), claimed AS (
    -- work already begun first (waiters woken, dead holders' instances), then newcomers
    SELECT id FROM orphaned UNION ALL SELECT id FROM runnable LIMIT lim
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
