-- 0016: a timer poll leases the instances it wakes, as many as its worker pool has room for.
--
-- Why: a fired instance's row was written by the firing (its wakes), then again by a claim (its
-- lease), each a row version, index entries and, for the claim, a statement of its own (issue 14,
-- timer burst). The firing statement now takes the lease itself for up to `lease_lim` of the
-- instances it wakes (those whose timers fell due first) and returns them as claim_workflows()
-- does; the rest are woken as in 0015, for any pool to claim. A lease is granted on the claim's
-- terms (claim_workflows(), 0011): a new token, an expiry `lease_ms` from the transaction's
-- start, row_version moved on (which fences a holder whose lease ran out). A woken instance stays
-- `waiting` under its lease either way: its claimer applies the wake-up.
--
-- Everything else is 0015's: timers and instances taken SKIP LOCKED (no timer fires twice, no
-- instance is leased twice, a holder's instance is passed over and counted), stale timers fire
-- into nothing. One row comes back with the counts (its `wf` null), then one per leased instance.

DROP FUNCTION fire_due_timers(integer);
CREATE FUNCTION fire_due_timers(lim integer, lease_lim integer, lease_ms float8)
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
  RETURN QUERY
  SELECT l, (SELECT coalesce(jsonb_object_agg(o.step, o.output), '{}') FROM workflow_outputs o WHERE o.workflow_id = l.id), fired, next_due_ms, passed_over, woken_left
  FROM unnest(leased) l;
  PERFORM set_config('role', prev_role, true);
END
$fn$;

GRANT EXECUTE ON FUNCTION fire_due_timers(integer, integer, float8) TO flow_app, flow_engine;
