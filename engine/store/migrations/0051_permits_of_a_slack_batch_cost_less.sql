-- 0051: a batch that takes permits with room to spare costs Postgres less.
--
-- Why: with a limit on a handler that is never reached, 10-step chains ran 13-23% fewer steps a
-- second than with no limit (the goal is 10% at most), and the difference was Postgres's CPU,
-- some 60-80 us a step. A batch's permits cost a fixed part (permits_slack() and take_slack(),
-- each a function call with a setting of its own and several statements) and a part for each
-- element (its needs grouped, its lease's permits looked up, its receipt answered by a query of
-- its own). Replaying one live batch of about 30 elements 200 times, with its permits and without,
-- they cost 36-42 us an element before this migration and 26-35 us after.
--
-- Now:
-- - an element's receipt is a row returned, not a query run (RETURN NEXT where it was RETURN QUERY);
-- - take_slack() checks and takes in one statement: its UPDATE reads the rows as the check does,
--   and a check that fails raises, which rolls the UPDATE back with the whole batch;
-- - permits_slack(), take_slack() and grant_slack() run only inside commit_batch(), whose
--   plan_cache_mode they inherit: their own setting, saved and restored on each call, is dropped;
-- - permits_slack() keeps one of a bucket's needs as it is, where it turned each into text to take
--   the least.
-- What they decide is unchanged.

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
  -- checked and taken in one statement: the UPDATE reads the rows as the check does, and a
  -- check that fails rolls it back with the rest
  WITH seen AS (
    SELECT e.*, b.tokens AS had, b.refilled_at, b.limit_changed_at,
           (SELECT count(*) FROM jsonb_array_elements(needs) t WHERE t->>'s' = e.s AND t->>'r' = e.r AND t->>'k' = e.k) AS taken
    FROM jsonb_to_recordset(buckets) e(s text, r text, k text, cap integer, rate float8, burst integer, changed timestamptz)
    JOIN limit_buckets b ON b.env_id = e.s AND b.resource = e.r AND b.key = e.k
  ), took AS (
    UPDATE limit_buckets lb
    SET tokens = least(coalesce(seen.burst, 1)::float8, seen.had + seen.rate * extract(epoch FROM clock_timestamp() - seen.refilled_at)) - seen.taken,
        refilled_at = clock_timestamp()
    FROM seen
    WHERE seen.rate IS NOT NULL AND seen.taken > 0 AND lb.env_id = seen.s AND lb.resource = seen.r AND lb.key = seen.k
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
END
$fn$;

CREATE OR REPLACE FUNCTION commit_batch(ps jsonb, lock_first boolean DEFAULT false)
RETURNS TABLE (n integer, scope text, resource text, wait_ms float8, waiters boolean)
LANGUAGE plpgsql
SET enable_hashjoin = off
SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
  p        jsonb;
  c        integer;
  a        record;
  wf       uuid;
  tok      uuid;
  rv       bigint;
  kept     jsonb;
  slack    jsonb;
  kept_i   integer[];
  taking   jsonb := '[]';
  prev_role text := current_setting('role');
  len      integer := jsonb_array_length(ps);
  together boolean[];
  moved    integer[];
  borns    timestamptz[];
  done     integer[];
  f        record;
  k        integer;
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

  -- the elements committed together (see the header); 1-based, as SQL arrays are
  SELECT array_agg(t.ok ORDER BY t.i) INTO together
  FROM (SELECT e.i,
               NOT (e.p ? 'acquireOnly' OR e.p ? 'attributes' OR (e.p ? 'permits' AND slack IS NULL)
                    OR coalesce(e.p->'replaced', '{}') <> '{}' OR coalesce(e.p->'forgotten', '[]') <> '[]')
               AND count(*) OVER (PARTITION BY e.p->>'id') = 1 AS ok
        FROM jsonb_array_elements(ps) WITH ORDINALITY e(p, i)) t;

  IF true = ANY(together) THEN
    PERFORM set_config('role', 'flow_engine', true);
    WITH x AS (
      SELECT e.i, e.p FROM jsonb_array_elements(ps) WITH ORDINALITY e(p, i) WHERE together[e.i::integer]
    ), u AS (
      UPDATE workflows w SET
        state = x.p->>'state',
        output = x.p->'output',
        current_step = x.p->>'currentStep',
        error = nullif(x.p->'error', 'null'::jsonb),
        generation = (x.p->>'generation')::integer,
        ctx = x.p->'ctx',
        wakes = NULL,
        row_version = w.row_version + 1,
        commit_token = (x.p->>'by')::uuid,
        commit_version = w.row_version + 1,
        updated_at = now(),
        run_at = CASE WHEN x.p->>'leaseToken' IS NOT NULL AND x.p->>'runAfterMs' IS NULL THEN w.run_at
                      ELSE now() + coalesce((x.p->>'runAfterMs')::float8, 0) * interval '1 millisecond' END,
        lease_token = (x.p->>'leaseToken')::uuid,
        lease_expires_at = CASE WHEN x.p->>'leaseToken' IS NULL THEN NULL
                                ELSE now() + (x.p->>'leaseMs')::float8 * interval '1 millisecond' END
      FROM x
      WHERE w.id = (x.p->>'id')::uuid AND w.env_id = x.p->>'env'
        AND w.row_version = (x.p->>'rowVersion')::bigint AND w.state IS NOT DISTINCT FROM x.p->>'fromState'
      RETURNING x.i, w.created_at
    )
    SELECT array_agg(u.i::integer), array_agg(u.created_at) INTO moved, borns FROM u;

    SELECT array_agg(CASE WHEN together[g.i] THEN (g.i = ANY(moved))::integer END ORDER BY g.i) INTO done
    FROM generate_series(1, len) g(i);

    IF moved IS NOT NULL THEN
      SELECT bool_or(l.p->'added' <> '{}') AS added,
             coalesce(sum(jsonb_array_length(l.p->'attempts')), 0) AS attempts,
             bool_or(l.p ? 'journal') AS journal,
             bool_or(l.p->'outbox' <> '[]') AS outbox,
             bool_or(l.p->'timers' <> '[]') AS timers,
             array_agg((l.p->>'id')::uuid) FILTER (WHERE l.p->>'state' IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered')) AS ended,
             bool_or((l.p->>'notify')::boolean) AS notify
      INTO f
      FROM unnest(moved) m(i), LATERAL (SELECT ps->(m.i - 1) AS p) l;

      IF f.added THEN
        INSERT INTO workflow_outputs (env_id, workflow_id, step, output)
        SELECT l.p->>'env', (l.p->>'id')::uuid, o.key, o.value
        FROM unnest(moved) m(i), LATERAL (SELECT ps->(m.i - 1) AS p) l, jsonb_each(l.p->'added') o;
      END IF;

      IF f.attempts > 0 THEN
        MERGE INTO step_runs s
        USING (SELECT (l.p->>'id')::uuid AS wf, l.p->>'env' AS env, m.born, r.*
               FROM unnest(moved, borns) m(i, born), LATERAL (SELECT ps->(m.i - 1) AS p) l,
                    jsonb_to_recordset(l.p->'attempts') AS r(op text, seq int, step text, attempt int, generation int, kind text,
                      state text, input jsonb, output jsonb, error jsonb, "idempotencyKey" text)) w
        ON s.workflow_id = w.wf AND s.seq = w.seq AND s.born = w.born
        WHEN MATCHED AND w.op = 'finish' THEN
          UPDATE SET state = w.state, output = w.output, error = w.error, finished_at = now()
        WHEN NOT MATCHED AND w.op = 'insert' THEN
          INSERT (env_id, workflow_id, seq, step, attempt, generation, kind, state, input, output, error, idempotency_key, finished_at, born)
          VALUES (w.env, w.wf, w.seq, w.step, w.attempt, w.generation, w.kind, w.state, w.input, w.output, w.error,
                  w."idempotencyKey", CASE WHEN w.state = 'running' THEN NULL ELSE now() END, w.born);
        GET DIAGNOSTICS k = ROW_COUNT;
        IF k <> f.attempts THEN
          RAISE EXCEPTION 'a commit batch: % of its attempt writes found no row to finish or a row already there', f.attempts - k
            USING ERRCODE = 'data_exception';
        END IF;
      END IF;

      IF f.journal THEN
        INSERT INTO journal (env_id, workflow_id, n, from_state, event, decision, initial, born)
        SELECT l.p->>'env', (l.p->>'id')::uuid, (l.p->'journal'->>'n')::bigint, l.p->'journal'->>'fromState',
               l.p->'journal'->'event', l.p->'journal'->'decision', l.p->'journal'->'initial', m.born
        FROM unnest(moved, borns) m(i, born), LATERAL (SELECT ps->(m.i - 1) AS p) l
        WHERE l.p ? 'journal';
      END IF;

      k := 0;
      IF f.outbox THEN
        INSERT INTO outbox (env_id, workflow_id, kind, topic, payload, idempotency_key)
        SELECT l.p->>'env', (l.p->>'id')::uuid, o.kind, o.topic, o.payload, o."idempotencyKey"
        FROM unnest(moved) m(i), LATERAL (SELECT ps->(m.i - 1) AS p) l,
             jsonb_to_recordset(l.p->'outbox') AS o(kind text, topic text, payload jsonb, "idempotencyKey" text);
        GET DIAGNOSTICS k = ROW_COUNT;
      END IF;

      IF f.timers THEN
        INSERT INTO timers (env_id, id, workflow_id, purpose, fire_at, payload)
        SELECT l.p->>'env', gen_random_uuid(), (l.p->>'id')::uuid, t.purpose,
               coalesce(t.at, now() + t."delayMs" * interval '1 millisecond'), coalesce(t.sla, jsonb_build_object('seq', t.seq))
        FROM unnest(moved) m(i), LATERAL (SELECT ps->(m.i - 1) AS p) l,
             jsonb_to_recordset(l.p->'timers') AS t(purpose text, "delayMs" float8, at timestamptz, seq int, sla jsonb);
      END IF;

      IF f.ended IS NOT NULL THEN
        DELETE FROM timers WHERE workflow_id = ANY(f.ended);
        INSERT INTO outbox (env_id, workflow_id, kind, topic, payload, idempotency_key, url)
        SELECT w.env_id, w.id, 'callback', 'workflow.' || w.state,
               jsonb_build_object('id', w.id, 'env', w.env_id, 'logicId', w.logic_id, 'version', w.version,
                                  'state', w.state, 'output', w.output, 'error', w.error,
                                  'correlationId', w.correlation_id, 'generation', w.generation),
               w.id || ':callback:' || w.row_version, w.callback_url
        FROM workflows w WHERE w.id = ANY(f.ended) AND w.callback_url IS NOT NULL;
        GET DIAGNOSTICS c = ROW_COUNT;
        k := k + c;
      END IF;

      IF k > 0 THEN
        PERFORM pg_notify('flow_outbox', '');
      END IF;
      IF f.notify THEN
        PERFORM pg_notify('flow_work', '');
      END IF;
    END IF;
    PERFORM set_config('role', prev_role, true);
  END IF;

  FOR i IN 0 .. len - 1 LOOP
    p := ps->i;
    wf := (p->>'id')::uuid; tok := (p->>'leaseToken')::uuid; rv := (p->>'rowVersion')::bigint;
    IF p ? 'acquireOnly' THEN
      -- nothing to commit: the permits of the attempt the claim's lease is about to run
      IF slack IS NOT NULL THEN
        PERFORM set_config('role', 'flow_engine', true);
        PERFORM grant_slack(wf, tok, rv, p->'permits', slack);
        PERFORM set_config('role', prev_role, true);
        taking := taking || (p->'permits');
        n := 1; scope := NULL; resource := NULL; wait_ms := NULL; waiters := false;
        RETURN NEXT;
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
    -- committed together above, or here on its own
    c := coalesce(done[i + 1], commit_journaled(p));
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
      n := c; scope := NULL; resource := NULL; wait_ms := NULL; waiters := false;
      RETURN NEXT;
    ELSIF c = 1 AND p ? 'permits' THEN
      PERFORM set_config('role', 'flow_engine', true);
      IF kept IS NOT NULL THEN
        -- it goes on with the permits it holds: a token from each rate bucket, nothing else written
        UPDATE limit_buckets lb SET tokens = (g->>'tokens')::float8 - 1, refilled_at = clock_timestamp()
        FROM jsonb_array_elements(kept) g
        WHERE lb.env_id = g->>'s' AND lb.resource = g->>'r' AND lb.key = g->>'k';
        PERFORM set_config('role', prev_role, true);
        n := c; scope := NULL; resource := NULL; wait_ms := NULL; waiters := false;
        RETURN NEXT;
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
      n := c; scope := NULL; resource := NULL; wait_ms := NULL; waiters := NULL;
      RETURN NEXT;
    END IF;
  END LOOP;
  IF slack IS NOT NULL THEN
    PERFORM set_config('role', 'flow_engine', true);
    PERFORM take_slack(slack, taking);
    PERFORM set_config('role', prev_role, true);
  END IF;
END
$fn$;

ALTER FUNCTION grant_slack(uuid, uuid, bigint, jsonb, jsonb) RESET plan_cache_mode;
