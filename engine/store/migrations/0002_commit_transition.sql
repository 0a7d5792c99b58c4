-- 0002: one round trip per step.
--
-- Why: a step commit used to be BEGIN, set_config, the write, COMMIT — four round trips, and on a
-- two-core machine the socket writes alone cost more than Postgres' own work. commit_transition()
-- does a whole transition in one statement (its own transaction when called outside one): it
-- scopes itself to the instance's env and the flow_app role, writes the workflow row guarded by
-- row_version and state (the fence), and only when that matched writes the transition's attempt,
-- outbox and timer rows (write_effects). It restores the caller's role and env on the way out, so
-- a scheduler transaction can call it for instances of many envs in turn.

-- The rows a transition writes besides the workflow row itself; `p` as built by commit-transition.ts.
-- A transition into a terminal state also drops the instance's unfired timers and, when the
-- instance has a callback URL, writes its `callback` outbox row: the notification exists exactly
-- when the state does.
CREATE FUNCTION write_effects(wf uuid, env text, p jsonb) RETURNS void
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
    -- an instance that has ended waits for nothing: drop its unfired timers
    DELETE FROM timers WHERE workflow_id = wf AND fired_at IS NULL;

    -- one notification per transition into a terminal state; row_version (already bumped by the
    -- caller's write) makes the key unique per transition and stable across delivery retries
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

  -- wake idle workers when someone other than the writer should pick the instance up
  IF (p->>'notify')::boolean THEN
    PERFORM pg_notify('flow_work', '');
  END IF;
END
$fn$;

-- Returns 1 when the transition was written, 0 when the guard matched no row (nothing written).
CREATE FUNCTION commit_transition(p jsonb) RETURNS integer
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

GRANT EXECUTE ON FUNCTION write_effects(uuid, text, jsonb), commit_transition(jsonb) TO flow_app, flow_engine;
