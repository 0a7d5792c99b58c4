-- 0031: search attributes (instances found by business identity, not by uuid) and SLA breaches.
--
-- Why: operators look an instance up as "the payment of account acct-2", and only correlationId
-- could be filtered; and nothing flagged a definition that overran the time it should take.
--
-- * workflow_attributes: one row per (instance, attribute), the value in the column of its type,
--   each column with its own btree index led by (env_id, name), so filtering one attribute among
--   millions of instances is an index range scan, as the correlationId filter is. The rows are
--   written by write_effects(), in the commit of the transition that set them (the start, or a step
--   that succeeded). A transition that sets none carries no 'attributes' key and costs one jsonb
--   key test: a definition without attributes runs no extra statement.
-- * SLAs are timers (purpose 'sla', payload { step, within }), armed by the core when an instance
--   starts or a step is first reached. They wake nothing: fire_due_timers() turns a due one into a
--   row of sla_breaches, once per (instance, step) — the primary key — when the instance has not
--   ended and, for a step, still stands on it; the same statement writes the outbox event
--   `workflow.sla_breached` and returns the breaches so the firing process counts them
--   (flow_sla_breaches_total). An instance that ends drops its timers (write_effects), so one
--   finished in time never breaches. Definitions without an SLA arm no timer.

CREATE TABLE workflow_attributes (
  env_id      text             NOT NULL,
  workflow_id uuid             NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
  name        text             NOT NULL,
  type        text             NOT NULL CHECK (type IN ('string', 'number', 'time')),
  text_value  text             CHECK ((type = 'string') = (text_value IS NOT NULL)),
  num_value   double precision CHECK ((type = 'number') = (num_value IS NOT NULL)),
  time_value  timestamptz      CHECK ((type = 'time') = (time_value IS NOT NULL)),
  updated_at  timestamptz      NOT NULL DEFAULT now(),
  PRIMARY KEY (workflow_id, name)
);
-- the instance id rides in each index, so a filter reads the ids without visiting the table
CREATE INDEX workflow_attributes_text ON workflow_attributes (env_id, name, text_value) INCLUDE (workflow_id) WHERE text_value IS NOT NULL;
CREATE INDEX workflow_attributes_num ON workflow_attributes (env_id, name, num_value) INCLUDE (workflow_id) WHERE num_value IS NOT NULL;
CREATE INDEX workflow_attributes_time ON workflow_attributes (env_id, name, time_value) INCLUDE (workflow_id) WHERE time_value IS NOT NULL;

CREATE TABLE sla_breaches (
  env_id      text        NOT NULL,
  workflow_id uuid        NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
  logic_id    text        NOT NULL,
  -- the step whose SLA was breached; '' for the instance's own
  step        text        NOT NULL,
  within      text        NOT NULL,
  breached_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workflow_id, step)
);
CREATE INDEX sla_breaches_recent ON sla_breaches (env_id, breached_at DESC);

DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['workflow_attributes', 'sla_breaches']
  LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
    EXECUTE format($p$CREATE POLICY env_isolation ON %I TO flow_app
                     USING (env_id = current_setting('app.env_id', true))
                     WITH CHECK (env_id = current_setting('app.env_id', true))$p$, t);
    EXECUTE format('CREATE POLICY scheduler ON %I TO flow_engine USING (true) WITH CHECK (true)', t);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO flow_app, flow_engine', t);
  END LOOP;
END
$$;

-- write_effects_at() as in 0030, plus: the search attributes a transition set (p->'attributes',
-- only when it set some), and an SLA timer's payload (t.sla: { step, within }) in place of { seq }.
-- The three-argument write_effects() of 0030 still calls it for a new instance.
CREATE OR REPLACE FUNCTION write_effects_at(wf uuid, env text, p jsonb, born timestamptz) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  outboxed integer := 0;
  n        integer;
BEGIN
  IF p->'added' <> '{}' THEN
    INSERT INTO workflow_outputs (env_id, workflow_id, step, output)
    SELECT env, wf, o.key, o.value FROM jsonb_each(p->'added') o;
  END IF;
  IF p->'replaced' <> '{}' THEN
    UPDATE workflow_outputs w SET output = o.value FROM jsonb_each(p->'replaced') o
    WHERE w.workflow_id = wf AND w.step = o.key;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> (SELECT count(*) FROM jsonb_object_keys(p->'replaced')) THEN
      RAISE EXCEPTION 'workflow %: % of its replaced outputs have no row', wf, (SELECT count(*) FROM jsonb_object_keys(p->'replaced')) - n
        USING ERRCODE = 'data_exception';
    END IF;
  END IF;
  IF p->'forgotten' <> '[]' THEN
    DELETE FROM workflow_outputs WHERE workflow_id = wf AND step IN (SELECT jsonb_array_elements_text(p->'forgotten'));
  END IF;

  IF p->'attempts' <> '[]' THEN
    MERGE INTO step_runs s
    USING jsonb_to_recordset(p->'attempts') AS a(op text, seq int, step text, attempt int, generation int, kind text,
          state text, input jsonb, output jsonb, error jsonb, "idempotencyKey" text)
    ON s.workflow_id = wf AND s.seq = a.seq AND s.born = write_effects_at.born
    WHEN MATCHED AND a.op = 'finish' THEN
      UPDATE SET state = a.state, output = a.output, error = a.error, finished_at = now()
    WHEN NOT MATCHED AND a.op = 'insert' THEN
      INSERT (env_id, workflow_id, seq, step, attempt, generation, kind, state, input, output, error, idempotency_key, finished_at, born)
      VALUES (env, wf, a.seq, a.step, a.attempt, a.generation, a.kind, a.state, a.input, a.output, a.error,
              a."idempotencyKey", CASE WHEN a.state = 'running' THEN NULL ELSE now() END, write_effects_at.born);
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> jsonb_array_length(p->'attempts') THEN
      RAISE EXCEPTION 'workflow %: % of its attempt writes found no row to finish or a row already there', wf, jsonb_array_length(p->'attempts') - n
        USING ERRCODE = 'data_exception';
    END IF;
  END IF;

  IF p ? 'attributes' THEN
    -- a MERGE: set ones upserted in their type's column, unset ones (type null) deleted
    MERGE INTO workflow_attributes a
    USING jsonb_to_recordset(p->'attributes') AS x(name text, type text, text text, num float8, "time" timestamptz)
    ON a.workflow_id = wf AND a.name = x.name
    WHEN MATCHED AND x.type IS NULL THEN DELETE
    WHEN MATCHED THEN
      UPDATE SET type = x.type, text_value = x.text, num_value = x.num, time_value = x."time", updated_at = now()
    WHEN NOT MATCHED AND x.type IS NOT NULL THEN
      INSERT (env_id, workflow_id, name, type, text_value, num_value, time_value) VALUES (env, wf, x.name, x.type, x.text, x.num, x."time");
  END IF;

  IF p->'outbox' <> '[]' THEN
    INSERT INTO outbox (env_id, workflow_id, kind, topic, payload, idempotency_key)
    SELECT env, wf, o.kind, o.topic, o.payload, o."idempotencyKey"
    FROM jsonb_to_recordset(p->'outbox') AS o(kind text, topic text, payload jsonb, "idempotencyKey" text);
    GET DIAGNOSTICS outboxed = ROW_COUNT;
  END IF;

  IF p->'timers' <> '[]' THEN
    INSERT INTO timers (env_id, id, workflow_id, purpose, fire_at, payload)
    SELECT env, gen_random_uuid(), wf, t.purpose,
           coalesce(t.at, now() + t."delayMs" * interval '1 millisecond'), coalesce(t.sla, jsonb_build_object('seq', t.seq))
    FROM jsonb_to_recordset(p->'timers') AS t(purpose text, "delayMs" float8, at timestamptz, seq int, sla jsonb);
  END IF;

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

-- As in 0017, plus the SLA timers: a due one records its breach (see above) and is dropped; the
-- breaches recorded come back on the counts row, for the firing process's counter.
DROP FUNCTION fire_due_timers(integer, integer, float8);
CREATE FUNCTION fire_due_timers(lim integer, lease_lim integer, lease_ms float8)
RETURNS TABLE (wf workflows, outputs jsonb, fired integer, next_due_ms float8, passed_over integer, woken_left integer, breaches jsonb)
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role text := current_setting('role');
  leased    workflows[];
BEGIN
  PERFORM set_config('role', 'flow_engine', true);
  WITH due AS (
    SELECT t.id, t.workflow_id, t.purpose, t.fire_at, (t.payload->>'seq')::int AS seq, t.payload,
           coalesce(w.state = 'waiting' AND (w.ctx #>> '{running,seq}')::int = (t.payload->>'seq')::int, false) AS current,
           w.lease_expires_at IS NULL OR w.lease_expires_at < statement_timestamp() AS free
    FROM timers t JOIN workflows w ON w.id = t.workflow_id
    WHERE t.fire_at <= statement_timestamp()
    ORDER BY t.fire_at LIMIT lim
    FOR UPDATE OF t SKIP LOCKED
    FOR NO KEY UPDATE OF w SKIP LOCKED
  ), wake AS (
    -- each instance to wake, and whether this poll leases it: the first `lease_lim` to fall due
    SELECT workflow_id,
           jsonb_object_agg(purpose || ':' || seq, jsonb_build_object('purpose', purpose, 'seq', seq)) AS wakes,
           row_number() OVER (ORDER BY min(fire_at), workflow_id) <= lease_lim AS lease
    FROM due WHERE current AND free GROUP BY workflow_id
  ), woken AS (
    UPDATE workflows w
    SET wakes = coalesce(w.wakes, '{}') || d.wakes,
        run_at = statement_timestamp(),
        lease_token = CASE WHEN d.lease THEN gen_random_uuid() ELSE w.lease_token END,
        lease_expires_at = CASE WHEN d.lease THEN now() + lease_ms * interval '1 millisecond' ELSE w.lease_expires_at END,
        row_version = w.row_version + 1
    FROM wake d
    WHERE w.id = d.workflow_id
    RETURNING w AS woken_row, d.lease
  ), gone AS (
    DELETE FROM timers t USING due WHERE t.id = due.id AND (due.free OR NOT due.current)
    RETURNING t.id
  ), breached AS (
    -- an SLA timer is never `current`: it wakes nothing and is always dropped (gone)
    INSERT INTO sla_breaches (env_id, workflow_id, logic_id, step, within)
    SELECT w.env_id, w.id, w.logic_id, coalesce(due.payload->>'step', ''), due.payload->>'within'
    FROM due JOIN workflows w ON w.id = due.workflow_id
    WHERE due.purpose = 'sla'
      AND w.state NOT IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered')
      AND (due.payload->>'step' IS NULL OR w.current_step = due.payload->>'step')
    ON CONFLICT DO NOTHING
    RETURNING env_id, workflow_id, logic_id, step, within, breached_at
  ), announced AS (
    INSERT INTO outbox (env_id, workflow_id, kind, topic, payload, idempotency_key)
    SELECT b.env_id, b.workflow_id, 'event', 'workflow.sla_breached',
           jsonb_build_object('id', w.id, 'env', w.env_id, 'logicId', w.logic_id, 'version', w.version,
                              'step', nullif(b.step, ''), 'within', b.within, 'state', w.state,
                              'currentStep', w.current_step, 'correlationId', w.correlation_id,
                              'startedAt', w.created_at, 'breachedAt', b.breached_at),
           b.workflow_id || ':sla:' || b.step
    FROM breached b JOIN workflows w ON w.id = b.workflow_id
    RETURNING 1
  )
  SELECT (SELECT count(*) FROM gone),
         (SELECT count(*) FROM due WHERE current AND NOT free),
         (SELECT count(*) FROM woken WHERE NOT woken.lease),
         (SELECT array_agg(woken.woken_row) FROM woken WHERE woken.lease),
         (SELECT jsonb_agg(jsonb_build_object('env', b.env_id, 'logicId', b.logic_id, 'workflowId', b.workflow_id, 'step', nullif(b.step, '')))
            FROM breached b)
  INTO fired, passed_over, woken_left, leased, breaches;

  IF breaches IS NOT NULL THEN
    PERFORM pg_notify('flow_outbox', '');
  END IF;
  -- only the instances left unleased are work for the other pools
  IF woken_left > 0 THEN
    PERFORM pg_notify('flow_work', '');
  END IF;
  -- not yet due when this statement began; it may be by now (then the figure is negative)
  SELECT extract(epoch FROM min(t.fire_at) - clock_timestamp()) * 1000 INTO next_due_ms
  FROM timers t WHERE t.fire_at > statement_timestamp();
  RETURN NEXT;
  fired := NULL; next_due_ms := NULL; passed_over := NULL; woken_left := NULL; breaches := NULL;
  IF leased IS NOT NULL THEN
    RETURN QUERY SELECT l.wf, l.outputs, fired, next_due_ms, passed_over, woken_left, breaches FROM with_outputs(leased) l;
  END IF;
  PERFORM set_config('role', prev_role, true);
END
$fn$;
GRANT EXECUTE ON FUNCTION fire_due_timers(integer, integer, float8) TO flow_app, flow_engine;
