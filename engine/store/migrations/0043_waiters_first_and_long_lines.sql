-- 0043: a claim takes waiters woken for room before newcomers, and a long line is cheap to
-- stand in.
--
-- Why: a claim filled itself with due pending instances first, and took instances whose lease
-- had lapsed only with the room left over. An instance waiting for a cap is one of those:
-- acquire_permits() lets its lease go with `lease_expires_at` 'infinity', and
-- wake_permit_waiters() sets it to now when it keeps room for it (for 30 s). So while a backlog
-- of new instances was due, every claim was full of newcomers, and a waiter woken for room kept
-- for it sat behind the whole backlog, the room unused.
--
-- Now a claim first takes the waiters woken for room, oldest first, then due instances in
-- priority and env turns, then instances whose holder died, as before. What it takes first is
-- bounded by the caps' room. Waiters for a rate are not among them: taken first, a line that had
-- fallen behind came back all at once, and all but a few found no token and went back in line,
-- again and again (an unlimited handler beside a backlog of 10,000 for 50 calls/s ran at 0.2 of
-- its rate alone). They are found through permit_waiters by a small index: instances a limit
-- holds back are `processing` without a lease, and a scan of every lapsed `processing` row would
-- read all of them on every claim (an index on workflows.lease_expires_at would cost every
-- heartbeat and commit its HOT update).
--
-- A long line was dear to stand in, each time with the bucket locked: joining a line for a cap,
-- and waking it, counted the waiters woken and read the cap they carry over the whole line; an
-- instance's own place in line was found by reading its whole line; a wake-up deleted the
-- line's ended waiters first, a join of the whole line with their instances (3.2 ms a wake-up
-- with 3,000 in line); and whether anyone waits, in permits_slack() and take_slack(), was
-- planned as one scan of every line, hashed (5.8 ms a batch with 9,000 in line). Now indexes
-- answer the first three, a wake-up passes over ended waiters as it reads the line from its head
-- (the sweep, once a second, deletes them), and the last reads the head of the line. A cap of 8
-- at 10 ms a call over 3,000 instances started at once: 94 -> 132 calls a second.

CREATE INDEX permit_waiters_woken ON permit_waiters (env_id, resource, key, woken_at) WHERE kind = 'concurrency' AND woken_at IS NOT NULL;
CREATE INDEX permit_waiters_cap ON permit_waiters (env_id, resource, key, concurrency);
CREATE INDEX permit_waiters_instance ON permit_waiters (workflow_id, env_id, resource, key);

CREATE OR REPLACE FUNCTION claim_workflows(lim integer, lease_ms float8, weights jsonb DEFAULT '{}') RETURNS TABLE (wf workflows, outputs jsonb)
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
  ), turned AS (
    -- waiters woken for room kept for them (0027, 0033)
    SELECT w.id FROM workflows w
    WHERE w.id IN (SELECT q.workflow_id FROM permit_waiters q WHERE q.kind = 'concurrency' AND q.woken_at IS NOT NULL)
      AND w.state = 'processing' AND w.lease_token IS NULL AND w.lease_expires_at < statement_timestamp()
    ORDER BY w.lease_expires_at LIMIT lim
    FOR NO KEY UPDATE SKIP LOCKED
  ), orphaned AS (
    SELECT id FROM workflows
    WHERE state = 'processing' AND lease_expires_at < statement_timestamp()
    ORDER BY lease_expires_at LIMIT lim
    FOR NO KEY UPDATE SKIP LOCKED
  ), claimed AS (
    -- waiters woken for room, then newcomers, then lapsed leases (a waiter taken
    -- first may come again from `orphaned`: the UPDATE takes it once)
    SELECT id FROM turned UNION ALL SELECT id FROM runnable UNION ALL SELECT id FROM orphaned LIMIT lim
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

CREATE OR REPLACE FUNCTION wake_permit_waiters(s text, r text, k text) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
  cap   integer;
  o     limit_overrides;
  live  integer;
  woken integer;
  n     integer;
BEGIN
  PERFORM 1 FROM limit_buckets b WHERE b.env_id = s AND b.resource = r AND b.key = k FOR UPDATE;
  SELECT * INTO o FROM limit_overrides lo WHERE lo.env_id = s AND lo.resource = r;
  IF FOUND THEN cap := o.concurrency;
  ELSE SELECT max(q.concurrency) INTO cap FROM permit_waiters q WHERE q.env_id = s AND q.resource = r AND q.key = k;
  END IF;
  IF cap IS NULL THEN
    n := 1000000;  -- no cap (any more): every waiter goes
  ELSE
    SELECT count(*) INTO live FROM permits p JOIN workflows w ON w.id = p.workflow_id
    WHERE p.env_id = s AND p.resource = r AND p.key = k AND permit_alive(p, w);
    SELECT count(*) INTO woken FROM permit_waiters q
    WHERE q.env_id = s AND q.resource = r AND q.key = k AND q.kind = 'concurrency'
      AND q.woken_at > now() - interval '30 seconds';
    n := cap - live - woken;
  END IF;
  IF n <= 0 THEN RETURN 0; END IF;
  WITH first AS (
    -- the first in line whose instance has not ended (the sweep drops those that have)
    SELECT q.id, q.workflow_id FROM permit_waiters q JOIN workflows w ON w.id = q.workflow_id
    WHERE q.env_id = s AND q.resource = r AND q.key = k AND q.kind = 'concurrency'
      AND (q.woken_at IS NULL OR q.woken_at <= now() - interval '30 seconds')
      AND w.state NOT IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered')
    ORDER BY q.id LIMIT n
  ), marked AS (
    UPDATE permit_waiters q SET woken_at = now() FROM first WHERE q.id = first.id RETURNING q.workflow_id
  ), woke AS (
    -- only an instance nobody holds: a held one is running, and would lose its lease
    UPDATE workflows w SET lease_expires_at = now(), run_at = now()
    FROM marked WHERE w.id = marked.workflow_id AND w.lease_token IS NULL
    RETURNING w.id
  )
  SELECT count(*) INTO n FROM woke;
  IF n > 0 THEN PERFORM pg_notify('flow_work', ''); END IF;
  RETURN n;
END
$fn$;

CREATE OR REPLACE FUNCTION permits_slack(ps jsonb, OUT buckets jsonb, OUT kept integer[])
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
           -- the head of the line, by its index (an EXISTS here was planned as a scan of every line)
           AND (SELECT q.id FROM permit_waiters q WHERE q.env_id = l.s AND q.resource = l.r AND q.key = l.k ORDER BY q.id LIMIT 1) IS NULL
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

CREATE OR REPLACE FUNCTION take_slack(buckets jsonb, needs jsonb) RETURNS void
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
     OR (SELECT q.id FROM permit_waiters q WHERE q.env_id = s AND q.resource = r AND q.key = k ORDER BY q.id LIMIT 1) IS NOT NULL
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

-- CREATE OR REPLACE resets what ALTER FUNCTION set (0041)
ALTER FUNCTION permits_slack(jsonb) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION take_slack(jsonb, jsonb) SET plan_cache_mode = force_generic_plan;
