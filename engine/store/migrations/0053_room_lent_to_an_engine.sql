-- 0053: room lent to an engine, where a limit is far from reached.
--
-- Why: with a limit on a handler that is never reached, 10-step chains ran about 21% fewer steps
-- a second than with no limit (the goal is 10% at most). Every attempt's permit rode in its commit
-- batch: the batch checked the room (permits_slack()) and took a token from the bucket row
-- (take_slack()), whose lock it held through its WAL flush, so an engine's two batches out waited
-- for each other. Making that cheaper (0051) bought too little: the cost is that the work is done
-- at all, once an attempt, for a limit nowhere near binding.
--
-- Now an engine may borrow room from a bucket for its own attempts: slots of its cap and tokens
-- of its rate, lent in one statement and handed out in the engine's memory, with no statement an
-- attempt. It is lent only where it leaves the limit far from reached (at most half the cap taken,
-- twice the tokens asked for in the bucket), nobody waits in line, and for a handler's limit only
-- (a per-key limit is usually tight and its keys many).
--
-- Strictness holds with it:
-- - lent slots count as live permits wherever room is counted (acquire_permits(), permits_slack(),
--   take_slack(), wake_permit_waiters()): the calls an engine makes under them are at most those;
-- - lent tokens leave the bucket, and the bucket refills only up to its burst less what is lent.
--   So what can still be spent (the bucket and every loan) never exceeds the burst, and the calls
--   in any window stay within burst + rate x window, as without loans. Tokens a loan did not spend
--   are not given back: a loan returned only frees the room of its refill;
-- - a loan expires (expires_at) unless its engine keeps it; the sweep returns what a dead engine
--   left. A loan is not kept past a change of its limit: its engine returns it once its calls end.
-- An engine returns a loan it no longer uses (revoked, spent, idle, or at stop); a waiter whose
-- room that frees is woken then.

ALTER TABLE limit_buckets
  ADD COLUMN lent_slots integer NOT NULL DEFAULT 0,
  ADD COLUMN lent_tokens float8 NOT NULL DEFAULT 0;

CREATE TABLE limit_allowances (
  id          uuid        PRIMARY KEY,
  env_id      text        NOT NULL,
  resource    text        NOT NULL,
  key         text        NOT NULL,
  slots       integer     NOT NULL CHECK (slots >= 0),
  tokens      float8      NOT NULL CHECK (tokens >= 0),
  granted_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  expires_at  timestamptz NOT NULL
);
CREATE INDEX limit_allowances_expiry ON limit_allowances (expires_at);
ALTER TABLE limit_allowances ENABLE ROW LEVEL SECURITY;
ALTER TABLE limit_allowances FORCE ROW LEVEL SECURITY;
CREATE POLICY scheduler ON limit_allowances TO flow_engine USING (true) WITH CHECK (true);
GRANT SELECT, INSERT, UPDATE, DELETE ON limit_allowances TO flow_engine;

-- Lends an engine room from a need's bucket (as acquire_permits() reads a need): `want_slots` of
-- its cap and `want_tokens` of its rate, for `ttl_ms` unless kept. No row where it would leave the
-- limit close to reached, or anyone waits. slots/tokens come back null where the limit has no
-- cap/rate: the engine counts nothing of that.
CREATE FUNCTION lend_allowance(need jsonb, want_slots integer, want_tokens float8, ttl_ms float8)
RETURNS TABLE (id uuid, slots integer, tokens float8)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  s     text := need->>'s';
  r     text := need->>'r';
  k     text := need->>'k';
  cap   integer;
  rt    float8;
  bu    integer;
  o     limit_overrides;
  b     limit_buckets;
  live  integer;
  avail float8;
  lent  uuid := gen_random_uuid();
BEGIN
  IF (need->>'w')::boolean OR want_slots < 1 OR want_tokens < 1 THEN RETURN; END IF;
  SELECT * INTO o FROM limit_overrides lo WHERE lo.env_id = s AND lo.resource = r;
  IF FOUND THEN cap := o.concurrency; rt := o.rate; bu := o.burst;
  ELSE cap := (need->>'c')::integer; rt := (need->>'rate')::float8; bu := (need->>'burst')::integer;
  END IF;
  IF cap IS NULL AND rt IS NULL THEN RETURN; END IF;
  SELECT * INTO b FROM limit_buckets lb WHERE lb.env_id = s AND lb.resource = r AND lb.key = k FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO limit_buckets AS lb (env_id, resource, key, tokens, refilled_at)
    VALUES (s, r, k, coalesce(bu, 1), now()) ON CONFLICT DO NOTHING;
    SELECT * INTO b FROM limit_buckets lb WHERE lb.env_id = s AND lb.resource = r AND lb.key = k FOR UPDATE;
  END IF;
  IF EXISTS (SELECT 1 FROM permit_waiters q WHERE q.env_id = s AND q.resource = r AND q.key = k) THEN RETURN; END IF;
  IF cap IS NOT NULL THEN
    SELECT count(*) INTO live FROM permits p JOIN workflows w ON w.id = p.workflow_id
    WHERE p.env_id = s AND p.resource = r AND p.key = k AND permit_alive(p, w);
    -- at most half the cap taken once this is lent
    IF 2 * (live + b.lent_slots + want_slots) > cap THEN RETURN; END IF;
  END IF;
  IF rt IS NOT NULL THEN
    avail := least(coalesce(bu, 1)::float8 - b.lent_tokens, b.tokens + rt * extract(epoch FROM clock_timestamp() - b.refilled_at));
    IF avail < 2 * want_tokens THEN RETURN; END IF;
  END IF;
  UPDATE limit_buckets lb
  SET tokens = CASE WHEN rt IS NULL THEN lb.tokens ELSE avail - want_tokens END,
      refilled_at = CASE WHEN rt IS NULL THEN lb.refilled_at ELSE clock_timestamp() END,
      lent_slots = lb.lent_slots + CASE WHEN cap IS NULL THEN 0 ELSE want_slots END,
      lent_tokens = lb.lent_tokens + CASE WHEN rt IS NULL THEN 0 ELSE want_tokens END
  WHERE lb.env_id = s AND lb.resource = r AND lb.key = k;
  INSERT INTO limit_allowances AS a (id, env_id, resource, key, slots, tokens, expires_at)
  VALUES (lent, s, r, k, CASE WHEN cap IS NULL THEN 0 ELSE want_slots END, CASE WHEN rt IS NULL THEN 0 ELSE want_tokens END,
          now() + ttl_ms * interval '1 millisecond');
  RETURN QUERY SELECT lent, CASE WHEN cap IS NULL THEN NULL ELSE want_slots END, CASE WHEN rt IS NULL THEN NULL ELSE want_tokens END;
END
$fn$;

-- Keeps an engine's loans another `ttl_ms`, but not one lent before its limit last changed;
-- answers those kept (a loan not among them is gone or stale: its engine stops using it).
CREATE FUNCTION keep_allowances(ids uuid[], ttl_ms float8) RETURNS SETOF uuid
LANGUAGE sql AS $fn$
  UPDATE limit_allowances a SET expires_at = now() + ttl_ms * interval '1 millisecond'
  FROM limit_buckets b
  WHERE a.id = ANY(ids) AND b.env_id = a.env_id AND b.resource = a.resource AND b.key = a.key
    AND a.granted_at > coalesce(b.limit_changed_at, '-infinity')
  RETURNING a.id
$fn$;

-- Takes loans back (an engine's, done with them, or the sweep's, expired): their slots and tokens
-- leave the buckets' lent counts, and waiters are offered the room. Answers how many were woken.
CREATE FUNCTION return_allowances(ids uuid[]) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
  f record;
  n integer := 0;
BEGIN
  IF coalesce(cardinality(ids), 0) = 0 THEN RETURN 0; END IF;
  -- buckets in the order every acquirer locks them
  PERFORM 1 FROM limit_buckets b
  WHERE (b.env_id, b.resource, b.key) IN (SELECT a.env_id, a.resource, a.key FROM limit_allowances a WHERE a.id = ANY(ids))
  ORDER BY b.env_id, b.resource, b.key
  FOR UPDATE;
  FOR f IN
    WITH gone AS (DELETE FROM limit_allowances a WHERE a.id = ANY(ids) RETURNING a.*),
    sums AS (SELECT g.env_id, g.resource, g.key, sum(g.slots)::integer AS slots, sum(g.tokens) AS tokens FROM gone g GROUP BY 1, 2, 3),
    moved AS (
      UPDATE limit_buckets b SET lent_slots = b.lent_slots - sums.slots, lent_tokens = greatest(0, b.lent_tokens - sums.tokens)
      FROM sums WHERE b.env_id = sums.env_id AND b.resource = sums.resource AND b.key = sums.key
      RETURNING b.env_id, b.resource, b.key
    )
    SELECT m.env_id, m.resource, m.key FROM moved m ORDER BY 1, 2, 3
  LOOP
    IF EXISTS (SELECT 1 FROM permit_waiters q WHERE q.env_id = f.env_id AND q.resource = f.resource AND q.key = f.key AND q.kind = 'concurrency') THEN
      n := n + wake_permit_waiters(f.env_id, f.resource, f.key);
    END IF;
  END LOOP;
  RETURN n;
END
$fn$;

CREATE OR REPLACE FUNCTION acquire_permits(wf uuid, tok uuid, rv bigint, needs jsonb)
RETURNS TABLE (scope text, resource text, wait_ms float8, waiters boolean)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  prev_role text := current_setting('role');
  n      jsonb;
  s      text;
  r      text;
  k      text;
  cap    integer;
  rt     float8;
  bu     integer;
  o      limit_overrides;
  b      limit_buckets;
  mine   permit_waiters;
  live   integer;
  woken  integer;
  ahead  boolean;
  tokens float8;
  due    timestamptz;
  blocked_r text;
  blocked_k text;
  f      record;
  blocked_s text;
  blocked_ms float8;
  granted jsonb := '[]';
BEGIN
  PERFORM set_config('role', 'flow_engine', true);
  -- in one order, so two acquirers never wait on each other's bucket rows in turn
  FOR n IN SELECT e.value FROM jsonb_array_elements(needs) e ORDER BY e.value->>'s', e.value->>'r', e.value->>'k' LOOP
    s := n->>'s'; r := n->>'r'; k := n->>'k';
    SELECT * INTO o FROM limit_overrides lo WHERE lo.env_id = s AND lo.resource = r;
    IF FOUND THEN cap := o.concurrency; rt := o.rate; bu := o.burst;
    ELSE cap := (n->>'c')::integer; rt := (n->>'rate')::float8; bu := (n->>'burst')::integer;
    END IF;
    CONTINUE WHEN cap IS NULL AND rt IS NULL;
    -- a workflow's permit, once taken, is held until it ends: its later attempts pass
    IF (n->>'w')::boolean AND EXISTS (SELECT 1 FROM permits p WHERE p.workflow_id = wf AND p.env_id = s AND p.resource = r AND p.key = k) THEN
      CONTINUE;
    END IF;
    SELECT * INTO b FROM limit_buckets lb WHERE lb.env_id = s AND lb.resource = r AND lb.key = k FOR UPDATE;
    IF NOT FOUND THEN
      INSERT INTO limit_buckets AS lb (env_id, resource, key, tokens, refilled_at)
      VALUES (s, r, k, coalesce(bu, 1), now()) ON CONFLICT DO NOTHING;
      SELECT * INTO b FROM limit_buckets lb WHERE lb.env_id = s AND lb.resource = r AND lb.key = k FOR UPDATE;
    END IF;
    SELECT * INTO mine FROM permit_waiters q WHERE q.workflow_id = wf AND q.env_id = s AND q.resource = r AND q.key = k;
    IF cap IS NOT NULL THEN
      SELECT count(*) INTO live FROM permits p JOIN workflows w ON w.id = p.workflow_id
      WHERE p.env_id = s AND p.resource = r AND p.key = k AND p.workflow_id <> wf AND permit_alive(p, w);
      SELECT count(*) INTO woken FROM permit_waiters q
      WHERE q.env_id = s AND q.resource = r AND q.key = k AND q.kind = 'concurrency' AND q.workflow_id <> wf
        AND q.woken_at > now() - interval '30 seconds';
      -- first come, first served: a newcomer queues behind anyone waiting to be woken
      ahead := EXISTS (SELECT 1 FROM permit_waiters q
                       WHERE q.env_id = s AND q.resource = r AND q.key = k AND q.kind = 'concurrency'
                         AND q.workflow_id <> wf AND q.woken_at IS NULL
                         AND (mine.id IS NULL OR mine.kind <> 'concurrency' OR q.id < mine.id));
      IF live + woken + b.lent_slots >= cap OR ahead THEN
        IF mine.id IS NULL OR mine.kind <> 'concurrency' THEN
          -- a rate waiter leaves the rate line for this one
          DELETE FROM permit_waiters q WHERE q.id = mine.id;
          INSERT INTO permit_waiters (env_id, resource, key, workflow_id, kind, concurrency)
          VALUES (s, r, k, wf, 'concurrency', (n->>'c')::integer);
        ELSE
          UPDATE permit_waiters q SET woken_at = NULL WHERE q.id = mine.id;
        END IF;
        -- tell the holders' engines: their releases must look for waiters from now on
        PERFORM pg_notify('flow_permit_waiting', s || E'\n' || r);
        blocked_s := s; blocked_r := r; blocked_k := k; blocked_ms := NULL;
        EXIT;
      END IF;
    END IF;
    IF rt IS NOT NULL THEN
      tokens := least(coalesce(bu, 1)::float8 - b.lent_tokens, b.tokens + rt * extract(epoch FROM clock_timestamp() - b.refilled_at));
      -- the line is served at the rate: one whose turn came finds at most 0.1 s of tokens beyond its own
      IF mine.kind = 'rate' THEN tokens := least(tokens, 1 + rt * 0.1); END IF;
      -- a newcomer joins the line behind those in it; one whose turn came takes a token if there
      -- is one (one in line before it but late loses no turn: it takes the next token)
      ahead := (mine.id IS NULL OR mine.kind <> 'rate')
               AND EXISTS (SELECT 1 FROM permit_waiters q
                           WHERE q.env_id = s AND q.resource = r AND q.key = k AND q.kind = 'rate' AND q.workflow_id <> wf);
      IF tokens < 1 OR ahead THEN
        IF mine.kind = 'rate' THEN
          -- in line already, and woken early or ahead of its turn: keep the place, look again soon
          due := clock_timestamp() + (CASE WHEN tokens >= 1 THEN 1 ELSE 1 - tokens END) / rt * interval '1 second';
          UPDATE permit_waiters q SET due_at = due WHERE q.id = mine.id;
        ELSE
          -- a time in line: 1/rate after the last one given, and not before a token can exist
          due := greatest(clock_timestamp() + greatest(1 - tokens, 0) / rt * interval '1 second',
                          coalesce(b.next_slot, '-infinity') + interval '1 second' / rt);
          UPDATE limit_buckets lb SET next_slot = due WHERE lb.env_id = s AND lb.resource = r AND lb.key = k;
          DELETE FROM permit_waiters q WHERE q.id = mine.id;
          INSERT INTO permit_waiters (env_id, resource, key, workflow_id, kind, due_at, concurrency)
          VALUES (s, r, k, wf, 'rate', due, (n->>'c')::integer);
        END IF;
        blocked_s := s; blocked_r := r; blocked_k := k; blocked_ms := 1000 * extract(epoch FROM due - clock_timestamp());
        EXIT;
      END IF;
      granted := granted || jsonb_build_object('s', s, 'r', r, 'k', k, 'cap', cap, 'tokens', tokens);
      CONTINUE;
    END IF;
    granted := granted || jsonb_build_object('s', s, 'r', r, 'k', k, 'cap', cap);
  END LOOP;

  IF blocked_r IS NULL THEN
    -- every permit granted: take them (a token from each bucket), and wait for nothing any more
    UPDATE limit_buckets lb SET tokens = (g->>'tokens')::float8 - 1, refilled_at = clock_timestamp()
    FROM jsonb_array_elements(granted) g
    WHERE g ? 'tokens' AND lb.env_id = g->>'s' AND lb.resource = g->>'r' AND lb.key = g->>'k';
    INSERT INTO permits AS p (env_id, resource, key, workflow_id, lease_token, row_version)
    SELECT g->>'s', g->>'r', g->>'k', wf, CASE WHEN (n2->>'w')::boolean THEN NULL ELSE tok END,
           CASE WHEN (n2->>'w')::boolean THEN NULL ELSE rv END
    FROM jsonb_array_elements(granted) g
    JOIN jsonb_array_elements(needs) n2 ON n2->>'s' = g->>'s' AND n2->>'r' = g->>'r' AND n2->>'k' = g->>'k'
    WHERE g->>'cap' IS NOT NULL
    ON CONFLICT (workflow_id, env_id, resource, key) DO UPDATE
      SET lease_token = excluded.lease_token, row_version = excluded.row_version, acquired_at = now();
    DELETE FROM permit_waiters q USING jsonb_array_elements(granted) g
    WHERE q.workflow_id = wf AND q.env_id = g->>'s' AND q.resource = g->>'r' AND q.key = g->>'k';
    -- whether anyone waits on what it took: if not, its holder need not look when it lets go
    RETURN QUERY SELECT NULL::text, NULL::text, NULL::float8, EXISTS (
      SELECT 1 FROM jsonb_array_elements(granted) g JOIN permit_waiters q
        ON q.env_id = g->>'s' AND q.resource = g->>'r' AND q.key = g->>'k' AND q.kind = 'concurrency'
      WHERE g->>'cap' IS NOT NULL);
  ELSE
    -- it waits in one line only: the lines it stood in for its other permits let it go. Where
    -- a wake-up kept room for it, that room goes to the next in line (the buckets are locked in
    -- the order above: the ones before the blocked one are held already, the later ones are
    -- taken in order; a line not among its needs now is left to the sweep)
    FOR f IN
      SELECT q.id, q.env_id, q.resource, q.key, q.kind, q.woken_at,
             (q.env_id, q.resource, q.key) > (blocked_s, blocked_r, blocked_k)
               OR EXISTS (SELECT 1 FROM jsonb_array_elements(granted) g WHERE g->>'s' = q.env_id AND g->>'r' = q.resource AND g->>'k' = q.key) AS lockable
      FROM permit_waiters q
      WHERE q.workflow_id = wf AND (q.env_id, q.resource, q.key) <> (blocked_s, blocked_r, blocked_k)
      ORDER BY q.env_id, q.resource, q.key
    LOOP
      DELETE FROM permit_waiters q WHERE q.id = f.id;
      IF f.kind = 'concurrency' AND f.woken_at IS NOT NULL AND f.lockable THEN
        PERFORM wake_permit_waiters(f.env_id, f.resource, f.key);
      END IF;
    END LOOP;
    -- wait: let the lease go as its holder (a receipt, so no lease-taken notice), with the
    -- wake-up time of its turn for a token, or none until a release wakes it
    UPDATE workflows w
    SET lease_token = NULL,
        lease_expires_at = CASE WHEN blocked_ms IS NULL THEN 'infinity' ELSE clock_timestamp() + blocked_ms * interval '1 millisecond' END,
        run_at = CASE WHEN blocked_ms IS NULL THEN 'infinity' ELSE clock_timestamp() + blocked_ms * interval '1 millisecond' END,
        row_version = w.row_version + 1, commit_token = w.lease_token, commit_version = w.row_version + 1
    WHERE w.id = wf AND w.lease_token = tok AND w.row_version = rv;
    RETURN QUERY SELECT blocked_s, blocked_r, blocked_ms, true;
  END IF;
  PERFORM set_config('role', prev_role, true);
END
$fn$;

CREATE OR REPLACE FUNCTION permits_kept(wf uuid, tok uuid, needs jsonb) RETURNS jsonb
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
      tokens := least(coalesce(bu, 1)::float8 - b.lent_tokens, b.tokens + rt * extract(epoch FROM clock_timestamp() - b.refilled_at));
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

CREATE OR REPLACE FUNCTION permits_slack(ps jsonb, OUT buckets jsonb, OUT kept integer[])
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  WITH wanted AS (
    SELECT need->>'s' AS s, need->>'r' AS r, need->>'k' AS k, count(*) AS n,
           count(DISTINCT jsonb_build_array(need->'c', need->'rate', need->'burst', need->'w')) AS configs,
           bool_or((need->>'w')::boolean) AS wide, (array_agg(need))[1] AS need
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
           AND (l.cap IS NULL OR l.n + 128 + b.lent_slots + (SELECT count(*) FROM (SELECT 1 FROM permits p WHERE p.env_id = l.s AND p.resource = l.r AND p.key = l.k LIMIT l.cap + 1) x) <= l.cap)
           AND (l.rate IS NULL OR least(coalesce(l.burst, 1)::float8 - b.lent_tokens, b.tokens + l.rate * extract(epoch FROM clock_timestamp() - b.refilled_at)) >= l.n + 128) AS ok
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
  -- checked and taken in one statement: the UPDATE reads the rows as the check does, and a
  -- check that fails rolls it back with the rest
  WITH seen AS (
    SELECT e.*, b.tokens AS had, b.refilled_at, b.limit_changed_at, b.lent_slots, b.lent_tokens,
           (SELECT count(*) FROM jsonb_array_elements(needs) t WHERE t->>'s' = e.s AND t->>'r' = e.r AND t->>'k' = e.k) AS taken
    FROM jsonb_to_recordset(buckets) e(s text, r text, k text, cap integer, rate float8, burst integer, changed timestamptz)
    JOIN limit_buckets b ON b.env_id = e.s AND b.resource = e.r AND b.key = e.k
  ), took AS (
    UPDATE limit_buckets lb
    SET tokens = least(coalesce(seen.burst, 1)::float8 - seen.lent_tokens, seen.had + seen.rate * extract(epoch FROM clock_timestamp() - seen.refilled_at)) - seen.taken,
        refilled_at = clock_timestamp()
    FROM seen
    WHERE seen.rate IS NOT NULL AND seen.taken > 0 AND lb.env_id = seen.s AND lb.resource = seen.r AND lb.key = seen.k
  )
  SELECT string_agg(format('%s %s', s, r), ', ') INTO gone FROM seen
  WHERE limit_changed_at IS DISTINCT FROM changed
     OR (SELECT q.id FROM permit_waiters q WHERE q.env_id = s AND q.resource = r AND q.key = k ORDER BY q.id LIMIT 1) IS NOT NULL
     OR CASE WHEN cap IS NULL THEN false
             -- counted through the live ones only where the rows, live or not, exceed the cap
             WHEN lent_slots + (SELECT count(*) FROM (SELECT 1 FROM permits p WHERE p.env_id = s AND p.resource = r AND p.key = k LIMIT cap + 1) x) <= cap THEN false
             ELSE (SELECT count(*) FROM permits p JOIN workflows w ON w.id = p.workflow_id
                   WHERE p.env_id = s AND p.resource = r AND p.key = k AND permit_alive(p, w)) + lent_slots > cap END
     OR (rate IS NOT NULL AND taken > 0
         AND least(coalesce(burst, 1)::float8 - lent_tokens, had + rate * extract(epoch FROM clock_timestamp() - refilled_at)) < taken);
  IF gone IS NOT NULL THEN
    RAISE EXCEPTION 'no room left in % since the batch began', gone USING ERRCODE = 'serialization_failure';
  END IF;
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
  lent  integer;
BEGIN
  SELECT b.lent_slots INTO lent FROM limit_buckets b WHERE b.env_id = s AND b.resource = r AND b.key = k FOR UPDATE;
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
    n := cap - live - woken - coalesce(lent, 0);
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

CREATE OR REPLACE FUNCTION sweep_permits() RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role text := current_setting('role');
  f record;
  n integer := 0;
BEGIN
  PERFORM set_config('role', 'flow_engine', true);
  -- what an engine that died had lent: its calls ended with it
  n := return_allowances(ARRAY(SELECT a.id FROM limit_allowances a WHERE a.expires_at < now()));
  DELETE FROM permits p USING workflows w WHERE w.id = p.workflow_id AND NOT permit_alive(p, w);
  DELETE FROM permits p WHERE NOT EXISTS (SELECT 1 FROM workflows w WHERE w.id = p.workflow_id);
  DELETE FROM permit_waiters q WHERE NOT EXISTS (SELECT 1 FROM workflows w WHERE w.id = q.workflow_id
    AND w.state NOT IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered'));
  FOR f IN SELECT DISTINCT q.env_id, q.resource, q.key FROM permit_waiters q WHERE q.kind = 'concurrency' LOOP
    n := n + wake_permit_waiters(f.env_id, f.resource, f.key);
  END LOOP;
  PERFORM set_config('role', prev_role, true);
  RETURN n;
END
$fn$;
