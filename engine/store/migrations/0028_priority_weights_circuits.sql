-- 0028: claims honour each instance's priority and each env's weight; handler circuits are
-- shared by every engine node.
--
-- Why: a claim took each env's instances by run_at alone, and every env had one turn per round,
-- so an urgent start waited behind an env's whole backlog and a production env got no more of the
-- pool than a staging one. And a handler that kept failing was called by every instance, each
-- burning its attempts until it dead-lettered, while nothing told an operator that the service
-- was down.
--
-- Priority: `workflows.priority` (higher first; 0 unless the start request or the definition
-- says otherwise). The runnable index now leads with (env_id, priority), so within an env the
-- claim walks the distinct priorities present (a skip scan, one probe per env and priority,
-- highest first) and reads each one's due instances by run_at: every probe is an index range, and
-- an instance waiting for a later run_at never has to be stepped over.
--
-- Weights: claim_workflows() takes `weights` ({"<env>": <weight>}, absent envs weigh 1). An env
-- of weight w gets w instances per turn: its n-th instance is in turn ceil(n / w). With every
-- weight 1 this is 0021's turn-taking exactly.
--
-- Circuits: one row per (env, handler profile). `failures` counts consecutive failed calls across
-- all nodes; `open_until` is when an open circuit lets one probe call through (half-open);
-- `probe_until` fences a probe in flight so that only one is made per node fleet.

ALTER TABLE workflows ADD COLUMN priority integer NOT NULL DEFAULT 0;

DROP INDEX workflows_runnable;
CREATE INDEX workflows_runnable ON workflows (env_id, priority, run_at)
  WHERE state IN ('pending', 'compensating') OR (state = 'waiting' AND wakes IS NOT NULL);

CREATE TABLE handler_circuits (
  env_id      text        NOT NULL,
  handler     text        NOT NULL,
  state       text        NOT NULL DEFAULT 'closed' CHECK (state IN ('closed', 'open')),
  failures    integer     NOT NULL DEFAULT 0,
  reason      text,
  opened_at   timestamptz,
  open_until  timestamptz,
  probe_until timestamptz,
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (env_id, handler)
);
ALTER TABLE handler_circuits ENABLE ROW LEVEL SECURITY;
ALTER TABLE handler_circuits FORCE ROW LEVEL SECURITY;
CREATE POLICY env_isolation ON handler_circuits TO flow_app
  USING (env_id = current_setting('app.env_id', true))
  WITH CHECK (env_id = current_setting('app.env_id', true));
CREATE POLICY scheduler ON handler_circuits TO flow_engine USING (true) WITH CHECK (true);
GRANT SELECT, INSERT, UPDATE, DELETE ON handler_circuits TO flow_app, flow_engine;

-- the held attempts (a 429/503 or an open circuit made the same attempt wait): the stuck report
-- finds the instances waiting on one through this index, not by reading every step run
CREATE INDEX step_runs_held ON step_runs (workflow_id, seq)
  WHERE state = 'failed' AND error->>'code' IN ('FLOW_THROTTLED', 'FLOW_CIRCUIT_OPEN');

DROP FUNCTION claim_workflows(integer, float8);
CREATE FUNCTION claim_workflows(lim integer, lease_ms float8, weights jsonb DEFAULT '{}') RETURNS TABLE (wf workflows, outputs jsonb)
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
GRANT EXECUTE ON FUNCTION claim_workflows(integer, float8, jsonb) TO flow_app, flow_engine;
