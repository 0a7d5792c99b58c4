-- 0037: the permits of an instance's next attempt are taken in the statement that commits this one.
--
-- Why: an attempt that needs a permit paid a statement of its own, acquire_permits(), before its
-- call: one more round trip and one more transaction (and WAL flush) per step, outside the
-- batched commits. With limits declared but never reached, a chain of steps ran 35–55% slower
-- than without them (bench/limits.bench.ts, goal ≤ 10%). A worker that keeps the lease goes
-- straight on to the next attempt, and knows before committing which permits that one needs; so
-- its commit now carries them (`permits` in the parameter, as acquire_permits() reads its
-- `needs`) and commit_batch() takes them right after the row has committed, in the same
-- transaction. The answer is acquire_permits()'s: granted, or the instance waits (its lease let go
-- by acquire_permits(), as before) and on what.
--
-- Lock order: a batch first locks the bucket rows of every permit it carries, in one global
-- order (scope, resource, key), before any workflow row, as a lone acquire_permits() and
-- wake_permit_waiters() do (bucket, then workflow). Two batches, or a batch and a release, never
-- wait on each other's buckets in turn. A bucket used for the first time is created by
-- acquire_permits() as before.
--
-- The return type changes (a row per element instead of an array of counts; `waiters` null where
-- the element carried no permits), hence DROP/CREATE.

DROP FUNCTION commit_batch(jsonb);

CREATE FUNCTION commit_batch(ps jsonb)
RETURNS TABLE (n integer, scope text, resource text, wait_ms float8, waiters boolean)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  p  jsonb;
  c  integer;
  a  record;
  prev_role text := current_setting('role');
BEGIN
  IF ps @? '$[*].permits' THEN
    PERFORM set_config('role', 'flow_engine', true);
    PERFORM 1 FROM limit_buckets b
    WHERE (b.env_id, b.resource, b.key) IN (
      SELECT need->>'s', need->>'r', need->>'k'
      FROM jsonb_array_elements(ps) e, jsonb_array_elements(e->'permits') need
      WHERE e ? 'permits')
    ORDER BY b.env_id, b.resource, b.key
    FOR UPDATE;
    PERFORM set_config('role', prev_role, true);
  END IF;
  FOR i IN 0 .. jsonb_array_length(ps) - 1 LOOP
    p := ps->i;
    c := commit_journaled(p);
    IF c = 1 AND p ? 'permits' THEN
      -- the lease kept by the commit: its token, and the row version the commit left
      SELECT * INTO a FROM acquire_permits((p->>'id')::uuid, (p->>'leaseToken')::uuid, (p->>'rowVersion')::bigint + 1, p->'permits');
      RETURN QUERY SELECT c, a.scope, a.resource, a.wait_ms, a.waiters;
    ELSE
      RETURN QUERY SELECT c, NULL::text, NULL::text, NULL::float8, NULL::boolean;
    END IF;
  END LOOP;
END
$fn$;

GRANT EXECUTE ON FUNCTION commit_batch(jsonb) TO flow_app, flow_engine;
