-- 0010: a step's commit updates the workflow row in place (a heap-only, "HOT", update).
--
-- Why: measured on Postgres 15 (bench/commit-path.bench.ts), not one update of `workflows` was
-- HOT. Each step's commit changed a column some index holds — updated_at (workflows_state),
-- run_at (workflows_runnable), lease_expires_at (workflows_leased) — so every step wrote a new
-- entry into each of the table's indexes that held the row (primary key, state, leased, live,
-- listing): five index inserts, their WAL, and bloat that vacuum must clean. Postgres updates a
-- row in place only when no indexed column (key or partial-index predicate) changes and the new
-- version fits on the same page. So:
--
-- * workflows_state drops updated_at: its readers (dead-lettered and parked lists, ordered by
--   updated_at) take few rows of one state and sort them; the index narrows to env and state.
-- * workflows_leased no longer keys on lease_expires_at, which every commit that keeps the lease
--   and every heartbeat moves. The instances held or being compensated are bounded by the
--   workers' concurrency (plus the orphans of a crashed one), so a claim looking for expired
--   leases reads that small set and sorts it; the heartbeat becomes in-place too.
-- * run_at is left alone by a commit that keeps the lease (the worker goes straight on): run_at
--   orders claims of rows nobody holds, and a held row is not claimable until it is let go — a
--   commit that lets go (or backs off) sets it as before.
-- * workflows leaves a quarter of each page free, so the new version fits beside the old.
--   Existing pages keep their layout until rewritten; the rows that matter are new ones.
--
-- A step that changes state (claim, park, end) still changes indexed columns: those updates stay
-- non-HOT, as they must, since the row moves between the partial indexes.

ALTER TABLE workflows SET (fillfactor = 75);

DROP INDEX workflows_state;
CREATE INDEX workflows_state ON workflows (env_id, state);

DROP INDEX workflows_leased;
CREATE INDEX workflows_leased ON workflows (state) WHERE state IN ('processing', 'compensating');

-- As in 0006, but a commit that keeps the lease and sets no backoff leaves run_at as it is.
CREATE OR REPLACE FUNCTION commit_transition(p jsonb) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role text := current_setting('role');
  prev_env  text := coalesce(current_setting('app.env_id', true), '');
  n         integer;
BEGIN
  PERFORM set_config('app.env_id', p->>'env', true), set_config('role', 'flow_app', true);

  UPDATE workflows SET
    state = p->>'state',
    output = p->'output',
    current_step = p->>'currentStep',
    error = nullif(p->'error', 'null'::jsonb),
    generation = (p->>'generation')::integer,
    ctx = p->'ctx',
    wakes = NULL,
    row_version = row_version + 1,
    commit_token = (p->>'by')::uuid,
    commit_version = row_version + 1,
    updated_at = now(),
    run_at = CASE WHEN p->>'leaseToken' IS NOT NULL AND p->>'runAfterMs' IS NULL THEN run_at
                  ELSE now() + coalesce((p->>'runAfterMs')::float8, 0) * interval '1 millisecond' END,
    lease_token = (p->>'leaseToken')::uuid,
    lease_expires_at = CASE WHEN p->>'leaseToken' IS NULL THEN NULL
                            ELSE now() + (p->>'leaseMs')::float8 * interval '1 millisecond' END
  WHERE id = (p->>'id')::uuid AND row_version = (p->>'rowVersion')::bigint AND state = p->>'fromState';
  GET DIAGNOSTICS n = ROW_COUNT;

  IF n = 1 THEN
    PERFORM write_effects((p->>'id')::uuid, p->>'env', p);
  END IF;

  PERFORM set_config('role', prev_role, true), set_config('app.env_id', prev_env, true);
  RETURN n;
END
$fn$;
