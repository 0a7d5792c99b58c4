-- 0015: a timer poll says how many due timers it passed over because a worker held their instance.
--
-- Why: such a timer is due as soon as its holder lets go, so every commit of a woken instance
-- rang the timer loop for another poll — during a burst, one poll every 10 ms that found nothing
-- (issue 14: ~0.17 polls per fired timer, each about a millisecond of the server's time). With
-- the count, the pool rings the timer loop after a woken instance's commit only while a poll is
-- out or the last one passed some over. Otherwise as in 0003.
DROP FUNCTION fire_due_timers(integer);
CREATE FUNCTION fire_due_timers(lim integer, OUT fired integer, OUT next_due_ms float8, OUT passed_over integer)
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role text := current_setting('role');
  woke      integer;
BEGIN
  PERFORM set_config('role', 'flow_engine', true);
  WITH due AS (
    SELECT t.id, t.workflow_id, t.purpose, (t.payload->>'seq')::int AS seq,
           coalesce(w.state = 'waiting' AND (w.ctx #>> '{running,seq}')::int = (t.payload->>'seq')::int, false) AS current,
           w.lease_expires_at IS NULL OR w.lease_expires_at < statement_timestamp() AS free
    FROM timers t JOIN workflows w ON w.id = t.workflow_id
    WHERE t.fire_at <= statement_timestamp()
    ORDER BY t.fire_at LIMIT lim
    FOR UPDATE OF t SKIP LOCKED
    FOR NO KEY UPDATE OF w SKIP LOCKED
  ), woken AS (
    UPDATE workflows w
    SET wakes = coalesce(w.wakes, '{}') || d.wakes,
        run_at = statement_timestamp(),
        row_version = w.row_version + 1
    FROM (SELECT workflow_id,
                 jsonb_object_agg(purpose || ':' || seq, jsonb_build_object('purpose', purpose, 'seq', seq)) AS wakes
          FROM due WHERE current AND free GROUP BY workflow_id) d
    WHERE w.id = d.workflow_id
    RETURNING w.id
  ), gone AS (
    DELETE FROM timers t USING due WHERE t.id = due.id AND (due.free OR NOT due.current)
    RETURNING t.id
  )
  SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM woken), (SELECT count(*) FROM due WHERE current AND NOT free)
  INTO fired, woke, passed_over;

  IF woke > 0 THEN
    PERFORM pg_notify('flow_work', '');
  END IF;
  -- not yet due when this statement began; it may be by now (then the figure is negative)
  SELECT extract(epoch FROM min(fire_at) - clock_timestamp()) * 1000 INTO next_due_ms
  FROM timers WHERE fire_at > statement_timestamp();
  PERFORM set_config('role', prev_role, true);
END
$fn$;

GRANT EXECUTE ON FUNCTION fire_due_timers(integer) TO flow_app, flow_engine;
