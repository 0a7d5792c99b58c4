-- 0050: a commit batch writes each table once for the whole batch, not once an element.
--
-- Why: commit_batch() committed its elements one by one through commit_journaled(), some ten
-- statements each (the workflow row, its outputs, its attempts, its journal row, the role and env
-- switches, the calls between the functions). On a 2-core box with 1,000 instances in flight,
-- Postgres's CPU a step was most of what bounded throughput, and a flat profile of it was mostly
-- statement set-up and tear-down: executor start (opening the table and its indexes, reading its
-- CHECK constraints again), plan cache checks, trigger queues.
--
-- Now the elements that only commit a transition (no permits to decide in order, no attributes,
-- no outputs replaced or forgotten, one element for their instance) are committed together first:
-- one UPDATE of workflows for all of them, then one INSERT a table for what the landed ones
-- write (outputs, attempts, journal, outbox, timers, what an ended instance writes). An element
-- whose permits are decided for the whole batch by permits_slack() is committed together too:
-- what it does after its commit depends only on whether the commit landed. The others (an
-- acquireOnly element, permits decided one by one, the rare writes) go on through
-- commit_journaled() in the loop, in their order, as before. Each element's receipt is answered
-- in its place.
--
-- These statements run as flow_engine, whose policy lets it write every env; each element's row
-- is matched on its env as well as its id, version and state, so an element still cannot move an
-- instance of another env (the flow_app policy did that before), and what it writes is tagged
-- with that env. The fence is the same: a row that moved since the lease read it is not updated,
-- its receipt is 0, and nothing else of it is written. A write that finds no row to finish, or a
-- row already there, still fails the whole statement.
--
-- Each statement finds its rows by key. Joins of the batch's elements with the tables are nested
-- loops over their keys (hash and merge joins are off inside the function): with the element
-- count unknown to a generic plan, a hash join over a large step_runs would read all of it. And
-- the plans are generic: with the batch's arrays known, each statement was planned afresh on
-- every call (7% of Postgres's CPU in a profile at 1,000 in flight).

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
