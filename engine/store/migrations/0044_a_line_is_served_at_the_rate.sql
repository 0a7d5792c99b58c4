-- 0044: a line for a rate is served at the rate.
--
-- Why: a rate limit is a token bucket: up to `burst` calls at once, then `rate` a second. An
-- instance that finds no token joins a line with a turn of its own, 1/rate after the one before.
-- But a waiter claimed late for its turn (the claim busy, a commit slow) found the bucket refilled
-- meanwhile, up to its whole burst, and it and the late ones after it all went at once. So the
-- service saw the burst again and again in the middle of a backlog, each time followed by a full
-- second at the rate: 60 calls in a second under 50/s with a burst of 10, the most the limit
-- allows, with nothing to spare for a commit's jitter (the limits bench once counted 61).
--
-- Now a waiter whose turn came takes from a bucket that holds, for the line, at most a tenth of a
-- second of tokens beyond its own: late waiters catch up that much at once, and the rest keep their
-- place and come again for their token. The burst is for who comes when nobody waits.
-- Only that line of acquire_permits() changes.

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
      IF live + woken >= cap OR ahead THEN
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
      tokens := least(coalesce(bu, 1)::float8, b.tokens + rt * extract(epoch FROM clock_timestamp() - b.refilled_at));
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
