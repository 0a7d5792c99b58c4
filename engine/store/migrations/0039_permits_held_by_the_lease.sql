-- 0039: a concurrency permit is held by the lease that took it, not rewritten on every attempt.
--
-- Why: with limits declared and never reached, a chain of steps ran about 36% slower than without
-- them (bench/limits.bench.ts, goal <= 10%). After 0037/0038 every attempt still ran the whole of
-- acquire_permits() inside the serial batched commit of the one before (the override, the bucket
-- lock, the waiter rows, the live permits counted through a join to workflows, the permit row
-- upserted, the waiter row deleted), although the attempt needs the very permit the attempt
-- before it held, under the same lease. Now:
--
-- * permit_alive(): an attempt permit is alive while the lease that took it is held and has not
--   expired (w.row_version >= p.row_version), not just for the row version it was taken at. A
--   commit or verb that lets the lease go (lease_token NULL or another token) ends it with no write
--   to the permit, as before; a holder that dies loses it when its lease expires, as before.
-- * commit_batch(): before a commit that keeps the lease and carries the next attempt's needs,
--   permits_kept() asks whether the instance may go on with what it holds: every concurrency
--   permit it needs held alive by this lease and taken since the limit last changed, none held
--   that it does not need, nobody in line on any of them (concurrency or rate), and a token in each
--   rate bucket. If so the commit takes one token from each rate bucket (one UPDATE) and writes
--   nothing else. Otherwise it goes through acquire_permits() as before; when granted, the attempt
--   permits this lease held and the next attempt does not need are yielded (lease_token NULL).
-- * A commit that keeps the lease and whose next attempt needs nothing carries `permits: []` when
--   the attempt it ends held any: they are yielded in the same statement (yield_permits() for a
--   commit that is a transaction of its own).
-- * apply_limit_change() stamps the resource's buckets (limit_changed_at): a permit taken before
--   a limit change is not kept, its holder's next attempt counts again under the new limit.
--
-- Waiters: someone in line on a permit always sends its holder's next attempt through
-- acquire_permits(), which queues it behind them first come first served (0033) and lets its
-- lease go; the worker's release after that commit wakes them, as after any attempt (0033). A
-- newcomer that finds the permit held queues and notifies the holders' engines, as before.
--
-- Lock order is 0037's: commit_batch() locks the bucket rows of every element first, in one global
-- order; permits_kept() only reads (under those locks), and the token UPDATE touches only buckets
-- already locked.

ALTER TABLE limit_buckets ADD COLUMN limit_changed_at timestamptz;

CREATE OR REPLACE FUNCTION permit_alive(p permits, w workflows) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT coalesce(CASE WHEN p.row_version IS NULL
    THEN w.state NOT IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered')
    ELSE w.lease_token = p.lease_token AND w.row_version >= p.row_version AND w.lease_expires_at > now()
  END, false)
$$;

-- Whether an instance may go on to its next attempt under lease `tok` with the permits it holds
-- (see above): the rate tokens to take ([] for none) if so, null if acquire_permits() must decide.
-- Reads only; called by commit_batch() before the commit, with the buckets locked.
CREATE FUNCTION permits_kept(wf uuid, tok uuid, needs jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  n      jsonb;
  s      text;
  r      text;
  k      text;
  cap    integer;
  rt     float8;
  bu     integer;
  o      limit_overrides;
  b      limit_buckets;
  held   integer := 0;
  tokens float8;
  taken  jsonb := '[]';
BEGIN
  FOR n IN SELECT e.value FROM jsonb_array_elements(needs) e LOOP
    s := n->>'s'; r := n->>'r'; k := n->>'k';
    SELECT * INTO o FROM limit_overrides lo WHERE lo.env_id = s AND lo.resource = r;
    IF FOUND THEN cap := o.concurrency; rt := o.rate; bu := o.burst;
    ELSE cap := (n->>'c')::integer; rt := (n->>'rate')::float8; bu := (n->>'burst')::integer;
    END IF;
    CONTINUE WHEN cap IS NULL AND rt IS NULL;
    IF (n->>'w')::boolean THEN
      -- a workflow's permit, held until it ends: as in acquire_permits()
      CONTINUE WHEN EXISTS (SELECT 1 FROM permits p WHERE p.workflow_id = wf AND p.env_id = s AND p.resource = r AND p.key = k);
      RETURN NULL;
    END IF;
    SELECT * INTO b FROM limit_buckets lb WHERE lb.env_id = s AND lb.resource = r AND lb.key = k;
    IF NOT FOUND THEN RETURN NULL; END IF;
    IF cap IS NOT NULL THEN
      IF NOT EXISTS (SELECT 1 FROM permits p JOIN workflows w ON w.id = p.workflow_id
                     WHERE p.workflow_id = wf AND p.env_id = s AND p.resource = r AND p.key = k
                       AND p.lease_token = tok AND p.row_version IS NOT NULL AND permit_alive(p, w)
                       AND p.acquired_at > coalesce(b.limit_changed_at, '-infinity'))
         OR EXISTS (SELECT 1 FROM permit_waiters q WHERE q.env_id = s AND q.resource = r AND q.key = k AND q.kind = 'concurrency') THEN
        RETURN NULL;
      END IF;
      held := held + 1;
    END IF;
    IF rt IS NOT NULL THEN
      tokens := least(coalesce(bu, 1)::float8, b.tokens + rt * extract(epoch FROM clock_timestamp() - b.refilled_at));
      IF tokens < 1 OR EXISTS (SELECT 1 FROM permit_waiters q WHERE q.env_id = s AND q.resource = r AND q.key = k AND q.kind = 'rate') THEN
        RETURN NULL;
      END IF;
      taken := taken || jsonb_build_object('s', s, 'r', r, 'k', k, 'tokens', tokens);
    END IF;
  END LOOP;
  -- nothing held that the next attempt does not need: acquire_permits() yields those
  IF (SELECT count(*) FROM permits p WHERE p.workflow_id = wf AND p.lease_token = tok AND p.row_version IS NOT NULL) <> held THEN
    RETURN NULL;
  END IF;
  RETURN taken;
END
$fn$;

-- Yields the attempt permits an instance holds under lease `tok`: what a commit that keeps the
-- lease, in a transaction of its own (a fan-out), calls when its next attempt's permits are taken
-- before that attempt instead. The worker's release wakes who waits on them, as after any attempt.
CREATE FUNCTION yield_permits(wf uuid, tok uuid) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role text := current_setting('role');
BEGIN
  PERFORM set_config('role', 'flow_engine', true);
  UPDATE permits p SET lease_token = NULL WHERE p.workflow_id = wf AND p.lease_token = tok AND p.row_version IS NOT NULL;
  PERFORM set_config('role', prev_role, true);
END
$fn$;

GRANT EXECUTE ON FUNCTION yield_permits(uuid, uuid) TO flow_app, flow_engine;

CREATE OR REPLACE FUNCTION commit_batch(ps jsonb)
RETURNS TABLE (n integer, scope text, resource text, wait_ms float8, waiters boolean)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  p    jsonb;
  c    integer;
  a    record;
  wf   uuid;
  tok  uuid;
  rv   bigint;
  kept jsonb;
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
    wf := (p->>'id')::uuid; tok := (p->>'leaseToken')::uuid; rv := (p->>'rowVersion')::bigint;
    IF p ? 'acquireOnly' THEN
      -- nothing to commit: the permits of the attempt the claim's lease is about to run
      SELECT * INTO a FROM acquire_permits(wf, tok, rv, p->'permits');
      RETURN QUERY SELECT 1, a.scope, a.resource, a.wait_ms, a.waiters;
      CONTINUE;
    END IF;
    kept := NULL;
    IF p ? 'permits' AND tok IS NOT NULL THEN
      -- asked before the commit: whether what it holds was alive under this lease until now
      PERFORM set_config('role', 'flow_engine', true);
      kept := permits_kept(wf, tok, p->'permits');
      PERFORM set_config('role', prev_role, true);
    END IF;
    c := commit_journaled(p);
    IF c = 1 AND p ? 'permits' THEN
      PERFORM set_config('role', 'flow_engine', true);
      IF kept IS NOT NULL THEN
        -- it goes on with the permits it holds: a token from each rate bucket, nothing else written
        UPDATE limit_buckets lb SET tokens = (g->>'tokens')::float8 - 1, refilled_at = clock_timestamp()
        FROM jsonb_array_elements(kept) g
        WHERE lb.env_id = g->>'s' AND lb.resource = g->>'r' AND lb.key = g->>'k';
        PERFORM set_config('role', prev_role, true);
        RETURN QUERY SELECT c, NULL::text, NULL::text, NULL::float8, false;
        CONTINUE;
      END IF;
      PERFORM set_config('role', prev_role, true);
      -- the lease kept by the commit: its token, and the row version the commit left
      SELECT * INTO a FROM acquire_permits(wf, tok, rv + 1, p->'permits');
      IF a.resource IS NULL THEN
        -- granted: what this lease held before and the next attempt does not need is yielded
        PERFORM set_config('role', 'flow_engine', true);
        UPDATE permits q SET lease_token = NULL
        WHERE q.workflow_id = wf AND q.lease_token = tok AND q.row_version IS NOT NULL AND q.row_version <= rv;
        PERFORM set_config('role', prev_role, true);
      END IF;
      RETURN QUERY SELECT c, a.scope, a.resource, a.wait_ms, a.waiters;
    ELSE
      RETURN QUERY SELECT c, NULL::text, NULL::text, NULL::float8, NULL::boolean;
    END IF;
  END LOOP;
END
$fn$;

-- 0027's, with the buckets of the resource stamped: permits taken before now are not kept (above).
CREATE OR REPLACE FUNCTION apply_limit_change(s text, r text) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role text := current_setting('role');
  f record;
  n integer := 0;
BEGIN
  PERFORM set_config('role', 'flow_engine', true);
  FOR f IN SELECT b.key FROM limit_buckets b WHERE b.env_id = s AND b.resource = r ORDER BY b.key FOR UPDATE LOOP
    WITH lined AS (
      DELETE FROM permit_waiters q WHERE q.env_id = s AND q.resource = r AND q.key = f.key AND q.kind = 'rate'
      RETURNING q.workflow_id
    ), restart AS (
      -- the clock, not the transaction's start: an acquire that held the lock before this one
      -- began its transaction earlier still
      UPDATE limit_buckets b SET next_slot = NULL, limit_changed_at = clock_timestamp()
      WHERE b.env_id = s AND b.resource = r AND b.key = f.key
    ), woke AS (
      UPDATE workflows w SET lease_expires_at = now(), run_at = now()
      FROM lined WHERE w.id = lined.workflow_id AND w.lease_token IS NULL
      RETURNING w.id
    )
    SELECT n + count(*) INTO n FROM woke;
    n := n + wake_permit_waiters(s, r, f.key);
  END LOOP;
  IF n > 0 THEN PERFORM pg_notify('flow_work', ''); END IF;
  PERFORM pg_notify('flow_limits', '');
  PERFORM set_config('role', prev_role, true);
  RETURN n;
END
$fn$;
