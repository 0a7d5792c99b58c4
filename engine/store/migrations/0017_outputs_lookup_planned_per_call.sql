-- 0017: the claim and the timer poll look up the outputs of the instances they lease with a plan
-- made for the table as it is.
--
-- Why: both functions read each leased instance's step outputs from workflow_outputs by
-- workflow_id. PL/pgSQL keeps the plan of each statement for its session, and from a statement's
-- sixth call on it settles on a generic plan, made with the table statistics of that moment.
-- When those said workflow_outputs was empty (an ANALYZE before the first step ended, as after a
-- deployment or a restore), the generic plan reads the whole table for every instance leased and
-- goes on doing so as the table grows, until autovacuum analyzes it again (after 50 rows and 10%
-- of the table have changed, at most once a minute). `npm run bench:timers` (a 10,000-timer
-- burst, statistics taken before any output existed): a claim of 32 took 16 ms on average,
-- 0.5-2.8 ms a lookup, 5.3 s of a 13 s burst.
--
-- The lookup is now dynamic SQL (EXECUTE), which PL/pgSQL plans on every call, from the table's
-- current size: it uses the primary key once the table has grown. The claim itself keeps its
-- cached plan: planning the whole claim on every call (plan_cache_mode = force_custom_plan) fixed
-- the lookup too, but cost 0.4-0.5 ms of Postgres CPU per claim or poll, four times an idle
-- claim. Pricing sequential scans out instead (enable_seqscan = off) kept the cached plans and
-- made claims in the burst take 0.6 s: where no index fits, the planner then reads a whole one.
--
-- Otherwise as before: claim_workflows() as in 0011, fire_due_timers() as in 0016. A later
-- migration that replaces either keeps the lookup in with_outputs()
-- (test/store/lookup-plans.test.ts fails otherwise).

-- Each of `rows` with its outputs as one object, step name to output.
CREATE FUNCTION with_outputs(rows workflows[]) RETURNS TABLE (wf workflows, outputs jsonb)
LANGUAGE plpgsql AS $fn$
BEGIN
  RETURN QUERY EXECUTE
    'SELECT l, (SELECT coalesce(jsonb_object_agg(o.step, o.output), ''{}'') FROM workflow_outputs o WHERE o.workflow_id = l.id)
     FROM unnest($1) l'
    USING rows;
END
$fn$;

CREATE OR REPLACE FUNCTION claim_workflows(lim integer, lease_ms float8) RETURNS TABLE (wf workflows, outputs jsonb)
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role  text := current_setting('role');
  taken_rows workflows[];
BEGIN
  PERFORM set_config('role', 'flow_engine', true);
  WITH runnable AS (
    SELECT id FROM workflows
    WHERE (state IN ('pending', 'compensating') OR (state = 'waiting' AND wakes IS NOT NULL))
      AND run_at <= statement_timestamp()
      AND (lease_expires_at IS NULL OR lease_expires_at < statement_timestamp())
    ORDER BY run_at LIMIT lim
    FOR NO KEY UPDATE SKIP LOCKED
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

CREATE OR REPLACE FUNCTION fire_due_timers(lim integer, lease_lim integer, lease_ms float8)
RETURNS TABLE (wf workflows, outputs jsonb, fired integer, next_due_ms float8, passed_over integer, woken_left integer)
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role text := current_setting('role');
  leased    workflows[];
BEGIN
  PERFORM set_config('role', 'flow_engine', true);
  WITH due AS (
    SELECT t.id, t.workflow_id, t.purpose, t.fire_at, (t.payload->>'seq')::int AS seq,
           coalesce(w.state = 'waiting' AND (w.ctx #>> '{running,seq}')::int = (t.payload->>'seq')::int, false) AS current,
           w.lease_expires_at IS NULL OR w.lease_expires_at < statement_timestamp() AS free
    FROM timers t JOIN workflows w ON w.id = t.workflow_id
    WHERE t.fire_at <= statement_timestamp()
    ORDER BY t.fire_at LIMIT lim
    FOR UPDATE OF t SKIP LOCKED
    FOR NO KEY UPDATE OF w SKIP LOCKED
  ), wake AS (
    -- each instance to wake, and whether this poll leases it: the first `lease_lim` to fall due
    SELECT workflow_id,
           jsonb_object_agg(purpose || ':' || seq, jsonb_build_object('purpose', purpose, 'seq', seq)) AS wakes,
           row_number() OVER (ORDER BY min(fire_at), workflow_id) <= lease_lim AS lease
    FROM due WHERE current AND free GROUP BY workflow_id
  ), woken AS (
    UPDATE workflows w
    SET wakes = coalesce(w.wakes, '{}') || d.wakes,
        run_at = statement_timestamp(),
        lease_token = CASE WHEN d.lease THEN gen_random_uuid() ELSE w.lease_token END,
        lease_expires_at = CASE WHEN d.lease THEN now() + lease_ms * interval '1 millisecond' ELSE w.lease_expires_at END,
        row_version = w.row_version + 1
    FROM wake d
    WHERE w.id = d.workflow_id
    RETURNING w AS woken_row, d.lease
  ), gone AS (
    DELETE FROM timers t USING due WHERE t.id = due.id AND (due.free OR NOT due.current)
    RETURNING t.id
  )
  SELECT (SELECT count(*) FROM gone),
         (SELECT count(*) FROM due WHERE current AND NOT free),
         (SELECT count(*) FROM woken WHERE NOT woken.lease),
         (SELECT array_agg(woken.woken_row) FROM woken WHERE woken.lease)
  INTO fired, passed_over, woken_left, leased;

  -- only the instances left unleased are work for the other pools
  IF woken_left > 0 THEN
    PERFORM pg_notify('flow_work', '');
  END IF;
  -- not yet due when this statement began; it may be by now (then the figure is negative)
  SELECT extract(epoch FROM min(t.fire_at) - clock_timestamp()) * 1000 INTO next_due_ms
  FROM timers t WHERE t.fire_at > statement_timestamp();
  RETURN NEXT;
  fired := NULL; next_due_ms := NULL; passed_over := NULL; woken_left := NULL;
  IF leased IS NOT NULL THEN
    RETURN QUERY SELECT l.wf, l.outputs, fired, next_due_ms, passed_over, woken_left FROM with_outputs(leased) l;
  END IF;
  PERFORM set_config('role', prev_role, true);
END
$fn$;

