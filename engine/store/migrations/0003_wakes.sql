-- 0003: firing a timer is one set-based statement; applying it is a worker's job.
--
-- Why: firing used to load each due instance, run its wake-up transition and commit it, one
-- after another inside the poller's transaction — about a millisecond each, so a burst of 10,000
-- timers due at once took ten seconds to fire. Now fire_due_timers() takes a whole batch in one
-- statement: it deletes the due timer rows and records on each instance what woke it (`wakes`,
-- keyed by purpose and attempt seq, so a burst of children's endings collapses into one). A woken
-- instance is claimable like a pending one; the worker that claims it applies its wakes and runs
-- the next step under the same lease. The timer goes and its wake arrives in one commit, so a
-- crash between firing and applying loses nothing: the next claimer applies it.
--
-- A timer row now lives until it fires (or its instance ends); what a timer did is in the
-- history of the attempt it ended (step_runs), so fired rows are not kept.

DELETE FROM timers WHERE fired_at IS NOT NULL;
DROP INDEX timers_due;
ALTER TABLE timers DROP COLUMN fired_at;
CREATE INDEX timers_due ON timers (fire_at);

ALTER TABLE workflows ADD COLUMN wakes jsonb;
-- what a claim looks for, in the order it takes it (claim_workflows() below)
DROP INDEX workflows_runnable;
CREATE INDEX workflows_runnable ON workflows (run_at)
  WHERE state IN ('pending', 'compensating') OR (state = 'waiting' AND wakes IS NOT NULL);

-- Fires up to `lim` due timers (database clock). A timer fires when it wakes its instance, or
-- when it is stale — its instance no longer waits on the attempt (`seq`) it was set for — and
-- then fires into nothing. A timer whose instance a worker holds (applying earlier wakes) stays
-- and fires at a later poll, so no wake is added under a worker about to clear them. Timer and
-- instance rows are both taken SKIP LOCKED: a transaction that holds an instance and drops its
-- timers (an ending) is passed over, not waited for, so the two never deadlock. Waking bumps
-- row_version, which fences a worker whose lease ran out meanwhile. Returns how many fired and
-- how long until the next timer not yet due falls due (null: none); a due one passed over waits
-- for the next poll, or for its holder to wake the poller when it lets go. Like
-- commit_transition(), it takes the scheduler role itself: a poll is one round trip.
CREATE FUNCTION fire_due_timers(lim integer, OUT fired integer, OUT next_due_ms float8)
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role text := current_setting('role');
  woke      integer;
BEGIN
  PERFORM set_config('role', 'flow_engine', true);
  WITH due AS (
    SELECT t.id, t.workflow_id, t.purpose, (t.payload->>'seq')::int AS seq,
           coalesce(w.state = 'waiting' AND (w.ctx #>> '{running,seq}')::int = (t.payload->>'seq')::int, false) AS current,
           w.lease_expires_at IS NULL OR w.lease_expires_at < statement_timestamp() AS free
    FROM timers t JOIN workflows w ON w.id = t.workflow_id
    WHERE t.fire_at <= statement_timestamp()
    ORDER BY t.fire_at LIMIT lim
    FOR UPDATE OF t SKIP LOCKED
    FOR NO KEY UPDATE OF w SKIP LOCKED
  ), woken AS (
    UPDATE workflows w
    SET wakes = coalesce(w.wakes, '{}') || d.wakes,
        run_at = statement_timestamp(),
        row_version = w.row_version + 1
    FROM (SELECT workflow_id,
                 jsonb_object_agg(purpose || ':' || seq, jsonb_build_object('purpose', purpose, 'seq', seq)) AS wakes
          FROM due WHERE current AND free GROUP BY workflow_id) d
    WHERE w.id = d.workflow_id
    RETURNING w.id
  ), gone AS (
    DELETE FROM timers t USING due WHERE t.id = due.id AND (due.free OR NOT due.current)
    RETURNING t.id
  )
  SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM woken) INTO fired, woke;

  IF woke > 0 THEN
    PERFORM pg_notify('flow_work', '');
  END IF;
  -- not yet due when this statement began; it may be by now (then the figure is negative)
  SELECT extract(epoch FROM min(fire_at) - clock_timestamp()) * 1000 INTO next_due_ms
  FROM timers WHERE fire_at > statement_timestamp();
  PERFORM set_config('role', prev_role, true);
END
$fn$;

-- Leases up to `lim` runnable instances across all environments, as the scheduler role, in one
-- round trip (claim-workflows.ts says what is runnable). The runnable ones come in the order of
-- the workflows_runnable index, which this predicate matches so the planner reads it.
CREATE FUNCTION claim_workflows(lim integer, lease_ms float8) RETURNS SETOF workflows
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role text := current_setting('role');
BEGIN
  PERFORM set_config('role', 'flow_engine', true);
  RETURN QUERY
  WITH runnable AS (
    SELECT id FROM workflows
    WHERE (state IN ('pending', 'compensating') OR (state = 'waiting' AND wakes IS NOT NULL))
      AND run_at <= statement_timestamp()
      AND (lease_expires_at IS NULL OR lease_expires_at < statement_timestamp())
    ORDER BY run_at LIMIT lim
    FOR NO KEY UPDATE SKIP LOCKED
  ), orphaned AS (
    SELECT id FROM workflows
    WHERE state = 'processing' AND lease_expires_at < statement_timestamp()
    ORDER BY lease_expires_at LIMIT lim
    FOR NO KEY UPDATE SKIP LOCKED
  ), claimed AS (
    SELECT id FROM runnable UNION ALL SELECT id FROM orphaned LIMIT lim
  )
  UPDATE workflows w
  SET state = CASE WHEN w.state IN ('compensating', 'waiting') THEN w.state ELSE 'processing' END,
      lease_token = gen_random_uuid(),
      lease_expires_at = now() + lease_ms * interval '1 millisecond',
      row_version = w.row_version + 1
  FROM claimed WHERE w.id = claimed.id
  RETURNING w.*;
  PERFORM set_config('role', prev_role, true);
END
$fn$;

-- As in 0002, but an instance that has ended drops all its timers: every row left is unfired.
CREATE OR REPLACE FUNCTION write_effects(wf uuid, env text, p jsonb) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  outboxed integer;
  n        integer;
BEGIN
  UPDATE step_runs s SET state = f.state, output = f.output, error = f.error, finished_at = now()
  FROM jsonb_to_recordset(p->'finishes') AS f(seq int, state text, output jsonb, error jsonb)
  WHERE s.workflow_id = wf AND s.seq = f.seq;

  INSERT INTO step_runs (env_id, workflow_id, seq, step, attempt, generation, kind, state, input, output, error,
                         idempotency_key, finished_at)
  SELECT env, wf, r.seq, r.step, r.attempt, r.generation, r.kind, r.state, r.input, r.output, r.error,
         r."idempotencyKey", CASE WHEN r.state = 'running' THEN NULL ELSE now() END
  FROM jsonb_to_recordset(p->'inserts') AS r(seq int, step text, attempt int, generation int, kind text,
       state text, input jsonb, output jsonb, error jsonb, "idempotencyKey" text);

  INSERT INTO outbox (env_id, workflow_id, kind, topic, payload, idempotency_key)
  SELECT env, wf, o.kind, o.topic, o.payload, o."idempotencyKey"
  FROM jsonb_to_recordset(p->'outbox') AS o(kind text, topic text, payload jsonb, "idempotencyKey" text);
  GET DIAGNOSTICS outboxed = ROW_COUNT;

  INSERT INTO timers (env_id, id, workflow_id, purpose, fire_at, payload)
  SELECT env, gen_random_uuid(), wf, t.purpose,
         coalesce(t.at, now() + t."delayMs" * interval '1 millisecond'), jsonb_build_object('seq', t.seq)
  FROM jsonb_to_recordset(p->'timers') AS t(purpose text, "delayMs" float8, at timestamptz, seq int);

  IF p->>'state' IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered') THEN
    DELETE FROM timers WHERE workflow_id = wf;

    INSERT INTO outbox (env_id, workflow_id, kind, topic, payload, idempotency_key, url)
    SELECT env, w.id, 'callback', 'workflow.' || w.state,
           jsonb_build_object('id', w.id, 'env', w.env_id, 'logicId', w.logic_id, 'version', w.version,
                              'state', w.state, 'output', w.output, 'error', w.error,
                              'correlationId', w.correlation_id, 'generation', w.generation),
           w.id || ':callback:' || w.row_version, w.callback_url
    FROM workflows w WHERE w.id = wf AND w.callback_url IS NOT NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    outboxed := outboxed + n;
  END IF;

  IF outboxed > 0 THEN
    PERFORM pg_notify('flow_outbox', '');
  END IF;

  IF (p->>'notify')::boolean THEN
    PERFORM pg_notify('flow_work', '');
  END IF;
END
$fn$;

-- As in 0002, plus `wakes = NULL`: every transition ends the wait its instance was in, so what
-- woke it is spent (a wake for a wait it enters now can only be written after this commit).
CREATE OR REPLACE FUNCTION commit_transition(p jsonb) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role text := current_setting('role');
  prev_env  text := coalesce(current_setting('app.env_id', true), '');
  n         integer;
BEGIN
  PERFORM set_config('app.env_id', p->>'env', true), set_config('role', 'flow_app', true);

  UPDATE workflows SET
    state = p->>'state',
    output = p->'output',
    current_step = p->>'currentStep',
    error = nullif(p->'error', 'null'::jsonb),
    generation = (p->>'generation')::integer,
    ctx = p->'ctx',
    wakes = NULL,
    row_version = row_version + 1,
    updated_at = now(),
    run_at = now() + coalesce((p->>'runAfterMs')::float8, 0) * interval '1 millisecond',
    lease_token = (p->>'leaseToken')::uuid,
    lease_expires_at = CASE WHEN p->>'leaseToken' IS NULL THEN NULL
                            ELSE now() + (p->>'leaseMs')::float8 * interval '1 millisecond' END
  WHERE id = (p->>'id')::uuid AND row_version = (p->>'rowVersion')::bigint AND state = p->>'fromState';
  GET DIAGNOSTICS n = ROW_COUNT;

  IF n = 1 THEN
    PERFORM write_effects((p->>'id')::uuid, p->>'env', p);
  END IF;

  PERFORM set_config('role', prev_role, true), set_config('app.env_id', prev_env, true);
  RETURN n;
END
$fn$;

GRANT EXECUTE ON FUNCTION fire_due_timers(integer), claim_workflows(integer, float8) TO flow_app, flow_engine;
