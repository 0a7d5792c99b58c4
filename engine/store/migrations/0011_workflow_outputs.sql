-- 0011: each step's output is stored once, in a row of its own, and a commit writes only the
-- outputs its transition changed.
--
-- Why: every commit rewrote the whole ctx, and ctx held the latest output of every step, so a
-- step's commit grew with the steps before it. Measured (bench/growth.bench.ts case 1: 200 steps,
-- 4 KB outputs): step 191–200 cost ~9–10× step 1–10, and the workflow wrote 94.8 MB of WAL for
-- 0.8 MB of outputs — O(n²). Now a step's commit upserts its one output row and updates a
-- workflow row whose ctx no longer carries outputs (still in place, as 0010 arranged). Whoever
-- reads an instance reassembles ctx.outputs from these rows (store/rows.ts, OUTPUTS_OF_W), so the
-- core, its expressions and the journal see exactly what they saw before.

CREATE TABLE workflow_outputs (
  env_id      text  NOT NULL,
  workflow_id uuid  NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
  step        text  NOT NULL,
  -- the step's latest output in this instance (JSON null is 'null', never SQL NULL)
  output      jsonb NOT NULL,
  PRIMARY KEY (workflow_id, step)
);

ALTER TABLE workflow_outputs ENABLE ROW LEVEL SECURITY;
ALTER TABLE workflow_outputs FORCE ROW LEVEL SECURITY;
CREATE POLICY env_isolation ON workflow_outputs TO flow_app
  USING (env_id = current_setting('app.env_id', true)) WITH CHECK (env_id = current_setting('app.env_id', true));
CREATE POLICY scheduler ON workflow_outputs TO flow_engine USING (true) WITH CHECK (true);
GRANT SELECT, INSERT, UPDATE, DELETE ON workflow_outputs TO flow_app, flow_engine;

-- Move every instance's outputs out of its ctx. The migrator may own the tables without being a
-- superuser, and FORCE'd row-level security would then hide every row from it: lifted for this
-- transaction only, so no output is left behind. The change-notification trigger (0009) is off
-- meanwhile: nothing a listener shows changes, and a large table would queue one per row.
ALTER TABLE workflows NO FORCE ROW LEVEL SECURITY;
ALTER TABLE workflow_outputs NO FORCE ROW LEVEL SECURITY;
ALTER TABLE workflows DISABLE TRIGGER workflows_notify_change;

INSERT INTO workflow_outputs (env_id, workflow_id, step, output)
SELECT w.env_id, w.id, o.key, o.value
FROM workflows w, jsonb_each(w.ctx->'outputs') o
WHERE jsonb_typeof(w.ctx->'outputs') = 'object';

UPDATE workflows SET ctx = ctx - 'outputs' WHERE ctx ? 'outputs';

ALTER TABLE workflows ENABLE TRIGGER workflows_notify_change;
ALTER TABLE workflows FORCE ROW LEVEL SECURITY;
ALTER TABLE workflow_outputs FORCE ROW LEVEL SECURITY;

-- As in 0003, plus the outputs: p->'outputs' ({ step: output }) are upserted, p->'forgotten'
-- ([step]) deleted — only what the transition changed (Transition.outputsChanged).
CREATE OR REPLACE FUNCTION write_effects(wf uuid, env text, p jsonb) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  outboxed integer;
  n        integer;
BEGIN
  IF p->'outputs' <> '{}' THEN
    INSERT INTO workflow_outputs (env_id, workflow_id, step, output)
    SELECT env, wf, o.key, o.value FROM jsonb_each(p->'outputs') o
    ON CONFLICT (workflow_id, step) DO UPDATE SET output = EXCLUDED.output;
  END IF;
  IF p->'forgotten' <> '[]' THEN
    DELETE FROM workflow_outputs WHERE workflow_id = wf AND step IN (SELECT jsonb_array_elements_text(p->'forgotten'));
  END IF;

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

-- As in 0003, but each claimed row comes with its outputs, read as the scheduler role like the
-- row itself: the claim stays one round trip, and the connecting user needs no policy of its own.
DROP FUNCTION claim_workflows(integer, float8);
CREATE FUNCTION claim_workflows(lim integer, lease_ms float8) RETURNS TABLE (wf workflows, outputs jsonb)
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
  ), taken AS (
    UPDATE workflows w
    SET state = CASE WHEN w.state IN ('compensating', 'waiting') THEN w.state ELSE 'processing' END,
        lease_token = gen_random_uuid(),
        lease_expires_at = now() + lease_ms * interval '1 millisecond',
        row_version = w.row_version + 1
    FROM claimed WHERE w.id = claimed.id
    RETURNING w AS claimed_row
  )
  SELECT t.claimed_row, (SELECT coalesce(jsonb_object_agg(o.step, o.output), '{}') FROM workflow_outputs o WHERE o.workflow_id = (t.claimed_row).id)
  FROM taken t;
  PERFORM set_config('role', prev_role, true);
END
$fn$;

GRANT EXECUTE ON FUNCTION claim_workflows(integer, float8) TO flow_app, flow_engine;
