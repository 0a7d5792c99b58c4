-- 0012: the transitions of many instances commit in one statement, one transaction, one fsync.
--
-- Why: each worker committed its step alone (`SELECT commit_journaled($1)`), so every step was a
-- transaction of its own and paid a WAL flush of its own: about 1.0 fsyncs per step at 16 and 64
-- instances in flight (issue 14), the step rate bound by the flush. The worker pool now queues
-- the commits that arrive while one is in flight and sends them together (runtime/commit-batcher.ts).
--
-- Each element is applied exactly as commit_journaled(p) applies it alone, in array order, and
-- keeps its own fence: a row whose row_version or state moved matches nothing and answers 0, and
-- the others still commit. A row that raises takes the statement down with it; the batcher then
-- commits that batch's rows one by one, so only the bad row fails (no subtransaction per row:
-- each would take an xid, and past 64 of them a backend's subxid cache overflows).
--
-- now() is the batch's: every row of it gets the same updated_at and lease start.

CREATE FUNCTION commit_batch(ps jsonb) RETURNS integer[]
LANGUAGE plpgsql AS $fn$
DECLARE
  ns integer[] := '{}';
BEGIN
  FOR i IN 0 .. jsonb_array_length(ps) - 1 LOOP
    ns := ns || commit_journaled(ps->i);
  END LOOP;
  RETURN ns;
END
$fn$;

GRANT EXECUTE ON FUNCTION commit_batch(jsonb) TO flow_app, flow_engine;
