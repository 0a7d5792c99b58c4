-- 0038: a claimed instance's first attempt takes its permits in the next batched commit too.
--
-- Why: after 0037 only the first attempt of a claimed instance still sent acquire_permits() as a
-- statement and a transaction of its own. With a concurrency cap those lone transactions queued on
-- the bucket's row lock, which each batch held from its start through its WAL flush: with
-- pg_stat_statements, each lone acquire waited about 54 ms, and the lock waits took 8.0 s of the
-- 8.6 s the acquires spent (bench/limits.bench.ts, uncontended). Now such an attempt sends an
-- element `{ acquireOnly: true, id, leaseToken, rowVersion, permits }` to the batcher: no row is
-- committed for it, acquire_permits() runs under the claim's lease and row version, and its answer
-- comes back like a committing element's. One engine's permit work is then serial in its batches,
-- and the bucket lock is taken once a batch instead of once an instance.
--
-- Lock order is 0037's: the buckets of every element first, in one global order, then rows.

CREATE OR REPLACE FUNCTION commit_batch(ps jsonb)
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
    IF p ? 'acquireOnly' THEN
      -- nothing to commit: the permits of the attempt the claim's lease is about to run
      SELECT * INTO a FROM acquire_permits((p->>'id')::uuid, (p->>'leaseToken')::uuid, (p->>'rowVersion')::bigint, p->'permits');
      RETURN QUERY SELECT 1, a.scope, a.resource, a.wait_ms, a.waiters;
      CONTINUE;
    END IF;
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
