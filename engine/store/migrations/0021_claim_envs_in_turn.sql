-- 0021: a claim takes runnable instances from every environment in turn, so one env's backlog
-- does not starve another env's instance.
--
-- Why: claim_workflows() took the `lim` runnable instances that fell due first, across all envs.
-- An env that started 10,000 instances put them all ahead of an instance another env started a
-- moment later: that one waited for the whole backlog to be claimed (and run) first.
--
-- Now each claim walks the envs that have runnable instances (a skip scan of the runnable index,
-- one probe per env, in env order) and, from each, locks its `lim` first due instances (SKIP
-- LOCKED, as before). Of those it takes by turn: every env's first, then every env's second, and
-- so on, the earliest due first within a turn, up to `lim`. So with up to `lim` envs waiting, a
-- claim takes at least one instance of each; one env alone gets the whole claim, as before. The
-- rows locked but not taken are let go when the statement ends. The runnable index now leads
-- with env_id so each env's due instances are read in run_at order. Orphaned instances (expired
-- leases) are taken as before, after the runnable ones.
--
-- Otherwise as 0017: one statement, the scheduler role, outputs read by with_outputs().

DROP INDEX workflows_runnable;
CREATE INDEX workflows_runnable ON workflows (env_id, run_at)
  WHERE state IN ('pending', 'compensating') OR (state = 'waiting' AND wakes IS NOT NULL);

CREATE OR REPLACE FUNCTION claim_workflows(lim integer, lease_ms float8) RETURNS TABLE (wf workflows, outputs jsonb)
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role  text := current_setting('role');
  taken_rows workflows[];
BEGIN
  PERFORM set_config('role', 'flow_engine', true);
  WITH RECURSIVE envs AS (
    -- each env with a runnable instance, due or not: one index probe per env (a skip scan)
    (SELECT env_id FROM workflows
     WHERE state IN ('pending', 'compensating') OR (state = 'waiting' AND wakes IS NOT NULL)
     ORDER BY env_id LIMIT 1)
    UNION ALL
    SELECT (SELECT w.env_id FROM workflows w
            WHERE (w.state IN ('pending', 'compensating') OR (w.state = 'waiting' AND w.wakes IS NOT NULL))
              AND w.env_id > e.env_id
            ORDER BY w.env_id LIMIT 1)
    FROM envs e WHERE e.env_id IS NOT NULL
  ), due AS (
    -- each env's first `lim` due instances nobody holds, with their turn within the env
    SELECT d.id, d.run_at, row_number() OVER (PARTITION BY e.env_id ORDER BY d.run_at) AS turn
    FROM envs e CROSS JOIN LATERAL (
      SELECT w.id, w.run_at FROM workflows w
      WHERE w.env_id = e.env_id
        AND (w.state IN ('pending', 'compensating') OR (w.state = 'waiting' AND w.wakes IS NOT NULL))
        AND w.run_at <= statement_timestamp()
        AND (w.lease_expires_at IS NULL OR w.lease_expires_at < statement_timestamp())
      ORDER BY w.run_at LIMIT lim
      FOR NO KEY UPDATE SKIP LOCKED
    ) d
    WHERE e.env_id IS NOT NULL
  ), runnable AS (
    SELECT id FROM due ORDER BY turn, run_at LIMIT lim
  ), orphaned AS (
    SELECT id FROM workflows
    WHERE state = 'processing' AND lease_expires_at < statement_timestamp()
    ORDER BY lease_expires_at LIMIT lim
    FOR NO KEY UPDATE SKIP LOCKED
  ), claimed AS (
    SELECT id FROM runnable UNION ALL SELECT id FROM orphaned LIMIT lim
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
