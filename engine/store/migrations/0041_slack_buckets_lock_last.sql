-- 0041: a batch whose limits have room to spare locks their buckets last, not first.
--
-- Why: with limits declared and never reached, a chain of steps ran ~30% slower than without them
-- (bench/limits.bench.ts, goal <= 10%). pg_stat_statements showed where: commit_batch() locked
-- the batch's bucket rows before its first element, and a handler's bucket is one row shared by
-- every instance calling it. So the second batch out (IN_FLIGHT, commit-batcher.ts) waited on
-- that lock for the whole of the first one, its WAL flush included: 5.3 ms a batch, more time
-- than every other permit statement together. Limited work committed one batch at a time.
--
-- Now commit_batch() first asks permits_slack() (reads only) whether every limited resource of
-- the batch has room to spare: its bucket exists, nobody waits on it (in either line), no element
-- needs a workflow's permit on it (held until the instance ends; such limits are usually tight),
-- its permit rows plus one for each element plus 128 stay within its cap, and its tokens cover one
-- for each element plus 128. It also decides, for the whole batch in one statement, which
-- elements go on with the permits their lease holds (what permits_kept() asks one by one). If all
-- is slack, the batch touches no bucket row while it commits its elements: the others' permit rows
-- are written by grant_slack(), and the tokens are counted. At the end take_slack() locks those
-- buckets in the global order, checks under the lock that what permits_slack() saw still holds
-- (the limit unchanged, nobody in line, live permits within the cap, a token for every call) and
-- takes the tokens, one UPDATE a bucket. Only that last statement and the commit hold the lock,
-- so the next batch runs beside it. The limits are as exact as before: every grant is checked
-- under its bucket's lock before the transaction commits.
--
-- If the check fails (another engine's batch took the room meanwhile, a limit changed, someone
-- joined the line), take_slack() raises serialization_failure: the batch is rolled back, and the
-- commit batcher sends each element again alone with `lock_first`, which locks the buckets before
-- the first row as before 0041 and cannot fail so. Where a resource is tight (a cap of 8, a rate
-- that binds, a per-key limit of 1), permits_slack() says no and nothing changes.
--
-- Lock order: a slack batch locks no bucket until its last statement, then all of them in the
-- global order (scope, resource, key); before that it holds only its own instances' rows and
-- permits, which no bucket holder waits for (a wake-up touches waiting instances, not running ones).

CREATE FUNCTION permits_slack(ps jsonb, OUT buckets jsonb, OUT kept integer[])
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  WITH wanted AS (
    SELECT need->>'s' AS s, need->>'r' AS r, need->>'k' AS k, count(*) AS n,
           count(DISTINCT jsonb_build_array(need->'c', need->'rate', need->'burst', need->'w')) AS configs,
           bool_or((need->>'w')::boolean) AS wide, min(need::text)::jsonb AS need
    FROM jsonb_array_elements(ps) e, jsonb_array_elements(e->'permits') need
    WHERE e ? 'permits'
    GROUP BY 1, 2, 3
  ), limited AS (
    -- the limit in force: its override, else what the elements carry
    SELECT d.*,
           CASE WHEN o.env_id IS NULL THEN (d.need->>'c')::integer ELSE o.concurrency END AS cap,
           CASE WHEN o.env_id IS NULL THEN (d.need->>'rate')::float8 ELSE o.rate END AS rate,
           CASE WHEN o.env_id IS NULL THEN (d.need->>'burst')::integer ELSE o.burst END AS burst
    FROM wanted d LEFT JOIN limit_overrides o ON o.env_id = d.s AND o.resource = d.r
  ), judged AS (
    SELECT l.s, l.r, l.k, l.cap, l.rate, l.burst, b.limit_changed_at AS changed,
           -- one config (engines may disagree), no workflow's permit (held until it ends, usually
           -- a tight per-key limit), a bucket, nobody in line, and room to spare
           b.env_id IS NOT NULL AND l.configs = 1 AND NOT l.wide
           AND NOT EXISTS (SELECT 1 FROM permit_waiters q WHERE q.env_id = l.s AND q.resource = l.r AND q.key = l.k)
           -- the permit rows, live or not, are at least the live ones: counted up to the cap
           AND (l.cap IS NULL OR l.n + 128 + (SELECT count(*) FROM (SELECT 1 FROM permits p WHERE p.env_id = l.s AND p.resource = l.r AND p.key = l.k LIMIT l.cap + 1) x) <= l.cap)
           AND (l.rate IS NULL OR least(coalesce(l.burst, 1)::float8, b.tokens + l.rate * extract(epoch FROM clock_timestamp() - b.refilled_at)) >= l.n + 128) AS ok
    FROM limited l LEFT JOIN limit_buckets b ON b.env_id = l.s AND b.resource = l.r AND b.key = l.k
    WHERE l.cap IS NOT NULL OR l.rate IS NOT NULL
  )
  SELECT CASE WHEN bool_and(ok) IS NOT FALSE
              THEN coalesce(jsonb_agg(jsonb_build_object('s', s, 'r', r, 'k', k, 'cap', cap, 'rate', rate, 'burst', burst, 'changed', changed)), '[]') END
  INTO buckets FROM judged;
  IF buckets IS NULL THEN RETURN; END IF;
  -- the commits that go on with what their lease holds (as permits_kept() asks, for the whole
  -- batch at once): every capped permit they need held alive by the lease since the limit last
  -- changed, and none held that they do not need
  WITH caps AS MATERIALIZED (
    SELECT bk.s, bk.r, bk.k, bk.changed
    FROM jsonb_to_recordset(buckets) bk(s text, r text, k text, cap integer, changed timestamptz)
    WHERE bk.cap IS NOT NULL
  ), el AS MATERIALIZED (
    SELECT (e.ord - 1)::integer AS i, (e.p->>'id')::uuid AS wf, (e.p->>'leaseToken')::uuid AS tok,
           (SELECT count(*) FROM jsonb_array_elements(e.p->'permits') n JOIN caps c ON (c.s, c.r, c.k) = (n->>'s', n->>'r', n->>'k')) AS needed
    FROM jsonb_array_elements(ps) WITH ORDINALITY e(p, ord)
    WHERE e.p ? 'permits' AND NOT e.p ? 'acquireOnly' AND e.p->>'leaseToken' IS NOT NULL
  )
  SELECT coalesce(array_agg(el.i), '{}') INTO kept
  FROM el, LATERAL (
    SELECT count(*) AS held,
           count(*) FILTER (WHERE c.s IS NOT NULL AND permit_alive(p, w) AND p.acquired_at > coalesce(c.changed, '-infinity')) AS good
    FROM permits p JOIN workflows w ON w.id = p.workflow_id
    LEFT JOIN caps c ON (c.s, c.r, c.k) = (p.env_id, p.resource, p.key)
    WHERE p.workflow_id = el.wf AND p.lease_token = el.tok AND p.row_version IS NOT NULL
  ) h
  WHERE h.held = h.good AND h.good = el.needed;
END
$fn$;

-- Grants an attempt's permits in a slack batch, as acquire_permits() does when it grants them:
-- a permit row, held by the lease, for each capped resource. Its tokens are taken by take_slack().
CREATE FUNCTION grant_slack(wf uuid, tok uuid, rv bigint, needs jsonb, buckets jsonb) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  INSERT INTO permits AS p (env_id, resource, key, workflow_id, lease_token, row_version)
  SELECT bk.s, bk.r, bk.k, wf, tok, rv
  FROM jsonb_array_elements(needs) n, jsonb_to_recordset(buckets) bk(s text, r text, k text, cap integer)
  WHERE bk.cap IS NOT NULL AND bk.s = n->>'s' AND bk.r = n->>'r' AND bk.k = n->>'k'
  ON CONFLICT (workflow_id, env_id, resource, key) DO UPDATE
    SET lease_token = excluded.lease_token, row_version = excluded.row_version, acquired_at = now();
END
$fn$;

-- The end of a slack batch: locks its buckets in the global order, checks under the lock that
-- what permits_slack() saw still holds, and takes the tokens in one UPDATE: one for each need in
-- `needs` (the needs of every attempt granted or kept, concatenated) whose bucket has a rate.
-- Raises serialization_failure where the room is gone: the caller commits each element alone.
CREATE FUNCTION take_slack(buckets jsonb, needs jsonb) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  gone text;
BEGIN
  PERFORM 1 FROM limit_buckets lb
  WHERE (lb.env_id, lb.resource, lb.key) IN (SELECT x->>'s', x->>'r', x->>'k' FROM jsonb_array_elements(buckets) x)
  ORDER BY lb.env_id, lb.resource, lb.key
  FOR UPDATE;
  WITH seen AS (
    SELECT e.*, b.tokens AS had, b.refilled_at, b.limit_changed_at,
           (SELECT count(*) FROM jsonb_array_elements(needs) t WHERE t->>'s' = e.s AND t->>'r' = e.r AND t->>'k' = e.k) AS taken
    FROM jsonb_to_recordset(buckets) e(s text, r text, k text, cap integer, rate float8, burst integer, changed timestamptz)
    JOIN limit_buckets b ON b.env_id = e.s AND b.resource = e.r AND b.key = e.k
  )
  SELECT string_agg(format('%s %s', s, r), ', ') INTO gone FROM seen
  WHERE limit_changed_at IS DISTINCT FROM changed
     OR EXISTS (SELECT 1 FROM permit_waiters q WHERE q.env_id = s AND q.resource = r AND q.key = k)
     OR CASE WHEN cap IS NULL THEN false
             -- counted through the live ones only where the rows, live or not, exceed the cap
             WHEN (SELECT count(*) FROM (SELECT 1 FROM permits p WHERE p.env_id = s AND p.resource = r AND p.key = k LIMIT cap + 1) x) <= cap THEN false
             ELSE (SELECT count(*) FROM permits p JOIN workflows w ON w.id = p.workflow_id
                   WHERE p.env_id = s AND p.resource = r AND p.key = k AND permit_alive(p, w)) > cap END
     OR (rate IS NOT NULL AND taken > 0
         AND least(coalesce(burst, 1)::float8, had + rate * extract(epoch FROM clock_timestamp() - refilled_at)) < taken);
  IF gone IS NOT NULL THEN
    RAISE EXCEPTION 'no room left in % since the batch began', gone USING ERRCODE = 'serialization_failure';
  END IF;
  UPDATE limit_buckets lb
  SET tokens = least(coalesce(e.burst, 1)::float8, lb.tokens + e.rate * extract(epoch FROM clock_timestamp() - lb.refilled_at)) - t.n,
      refilled_at = clock_timestamp()
  FROM jsonb_to_recordset(buckets) e(s text, r text, k text, rate float8, burst integer),
       LATERAL (SELECT count(*) AS n FROM jsonb_array_elements(needs) t WHERE t->>'s' = e.s AND t->>'r' = e.r AND t->>'k' = e.k) t
  WHERE e.rate IS NOT NULL AND t.n > 0 AND lb.env_id = e.s AND lb.resource = e.r AND lb.key = e.k;
END
$fn$;

-- 0039's, with the slack path: the buckets are locked first only where permits_slack() says no,
-- or where the caller asks (`lock_first`: the commit batcher sending again, one by one, the
-- elements of a batch that failed). A new argument, hence DROP/CREATE; an engine that calls
-- commit_batch(ps) still finds it.
DROP FUNCTION commit_batch(jsonb);

CREATE FUNCTION commit_batch(ps jsonb, lock_first boolean DEFAULT false)
RETURNS TABLE (n integer, scope text, resource text, wait_ms float8, waiters boolean)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  p      jsonb;
  c      integer;
  a      record;
  wf     uuid;
  tok    uuid;
  rv     bigint;
  kept   jsonb;
  slack  jsonb;
  kept_i integer[];
  taking jsonb := '[]';
  prev_role text := current_setting('role');
BEGIN
  IF ps @? '$[*].permits' THEN
    PERFORM set_config('role', 'flow_engine', true);
    IF NOT lock_first THEN SELECT * INTO slack, kept_i FROM permits_slack(ps); END IF;
    IF slack IS NULL THEN
      PERFORM 1 FROM limit_buckets b
      WHERE (b.env_id, b.resource, b.key) IN (
        SELECT need->>'s', need->>'r', need->>'k'
        FROM jsonb_array_elements(ps) e, jsonb_array_elements(e->'permits') need
        WHERE e ? 'permits')
      ORDER BY b.env_id, b.resource, b.key
      FOR UPDATE;
    END IF;
    PERFORM set_config('role', prev_role, true);
  END IF;
  FOR i IN 0 .. jsonb_array_length(ps) - 1 LOOP
    p := ps->i;
    wf := (p->>'id')::uuid; tok := (p->>'leaseToken')::uuid; rv := (p->>'rowVersion')::bigint;
    IF p ? 'acquireOnly' THEN
      -- nothing to commit: the permits of the attempt the claim's lease is about to run
      IF slack IS NOT NULL THEN
        PERFORM set_config('role', 'flow_engine', true);
        PERFORM grant_slack(wf, tok, rv, p->'permits', slack);
        PERFORM set_config('role', prev_role, true);
        taking := taking || (p->'permits');
        RETURN QUERY SELECT 1, NULL::text, NULL::text, NULL::float8, false;
        CONTINUE;
      END IF;
      SELECT * INTO a FROM acquire_permits(wf, tok, rv, p->'permits');
      RETURN QUERY SELECT 1, a.scope, a.resource, a.wait_ms, a.waiters;
      CONTINUE;
    END IF;
    kept := NULL;
    IF slack IS NOT NULL THEN
      -- asked for the whole batch by permits_slack()
      IF i = ANY(kept_i) THEN kept := '[]'; END IF;
    ELSIF p ? 'permits' AND tok IS NOT NULL THEN
      -- asked before the commit: whether what it holds was alive under this lease until now
      PERFORM set_config('role', 'flow_engine', true);
      kept := permits_kept(wf, tok, p->'permits');
      PERFORM set_config('role', prev_role, true);
    END IF;
    c := commit_journaled(p);
    IF c = 1 AND p ? 'permits' AND slack IS NOT NULL THEN
      IF kept IS NULL THEN
        -- granted with room to spare; what this lease held and the next attempt does not need is yielded
        PERFORM set_config('role', 'flow_engine', true);
        PERFORM grant_slack(wf, tok, rv + 1, p->'permits', slack);
        UPDATE permits q SET lease_token = NULL
        WHERE q.workflow_id = wf AND q.lease_token = tok AND q.row_version IS NOT NULL AND q.row_version <= rv;
        PERFORM set_config('role', prev_role, true);
      END IF;
      -- its tokens are taken at the end
      taking := taking || (p->'permits');
      RETURN QUERY SELECT c, NULL::text, NULL::text, NULL::float8, false;
    ELSIF c = 1 AND p ? 'permits' THEN
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
  IF slack IS NOT NULL THEN
    PERFORM set_config('role', 'flow_engine', true);
    PERFORM take_slack(slack, taking);
    PERFORM set_config('role', prev_role, true);
  END IF;
END
$fn$;

GRANT EXECUTE ON FUNCTION commit_batch(jsonb, boolean), permits_slack(jsonb), grant_slack(uuid, uuid, bigint, jsonb, jsonb), take_slack(jsonb, jsonb) TO flow_app, flow_engine;

-- Their statements read their jsonb arguments, and a custom plan for each call cost more than the
-- statement (pg_stat_statements: 0.1-0.2 ms of planning a batch); each goes by key either way.
ALTER FUNCTION permits_slack(jsonb) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION grant_slack(uuid, uuid, bigint, jsonb, jsonb) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION take_slack(jsonb, jsonb) SET plan_cache_mode = force_generic_plan;
