-- 0003: outbox delivery, instance callbacks, event triggers.
--
-- Why: the outbox rows written with a transition are delivered by a relay (runtime/outbox-relay.ts)
-- that needs to tell "delivered", "retrying" and "given up" apart and, for callback rows, where to
-- deliver. An instance may carry a callback URL; every transition that lands it in a terminal
-- state writes one `callback` outbox row in the same statement as the transition itself, so the
-- notification exists exactly when the state does. An ingested event remembers the instances it
-- started, so a repeat of its idempotency key answers with the same ids.

ALTER TABLE workflows ADD COLUMN callback_url text;

-- url: where a callback row goes (event rows go to the engine's event sink, so it stays null).
-- failed_at: set when the relay gave up (a permanent 4xx, or out of attempts); rows are never deleted.
ALTER TABLE outbox
  ADD COLUMN url text,
  ADD COLUMN failed_at timestamptz,
  ADD CONSTRAINT outbox_callback_has_url CHECK (kind <> 'callback' OR url IS NOT NULL),
  ADD CONSTRAINT outbox_one_outcome CHECK (delivered_at IS NULL OR failed_at IS NULL);
DROP INDEX outbox_undelivered;
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE delivered_at IS NULL AND failed_at IS NULL;
CREATE INDEX outbox_workflow ON outbox (workflow_id);

ALTER TABLE events ADD COLUMN started uuid[] NOT NULL DEFAULT '{}';

-- write_effects() of 0002, plus the callback row and a wake-up for the relay. Any later
-- redefinition must keep both.
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
