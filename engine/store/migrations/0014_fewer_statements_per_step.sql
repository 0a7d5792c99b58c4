-- 0014: a step's commit runs fewer statements and writes no row it does not need.
--
-- Why: with commits batched (0012), a step's cost is Postgres's work on the rows. A perf profile of
-- the warm server under the proxy bench (issue 14) put an eighth of it in executor start-up
-- (standard_ExecutorStart, 12.6% of the server's samples): every statement a PL/pgSQL function
-- runs builds and tears down an executor, whether it writes one row or none. A step's commit ran
-- seven: the workflow row, the attempt it finished, the attempt it prepared, the outbox rows and
-- the timers (almost always none), its output (an upsert, which inserts speculatively and writes
-- one more WAL record to confirm it), and its journal row. Now it runs four:
--
-- * the attempts are one MERGE: the finished one updated, the prepared one inserted, from the one
--   array the transition has (p->'attempts', in place of 'inserts' and 'finishes'). Every element
--   must land: a finish whose row is missing, or an insert whose row is already there, raises
--   rather than being dropped (before, a missing row was skipped without a word);
-- * outbox rows and timers are written only when there are some;
-- * an output new to the instance is a plain INSERT (p->'added'), one it already had is an UPDATE
--   (p->'replaced'); both must land, as the attempts must. The engine knows which is which: it
--   read the outputs with the instance (0011).

CREATE OR REPLACE FUNCTION write_effects(wf uuid, env text, p jsonb) RETURNS void
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
    ON s.workflow_id = wf AND s.seq = a.seq
    WHEN MATCHED AND a.op = 'finish' THEN
      UPDATE SET state = a.state, output = a.output, error = a.error, finished_at = now()
    WHEN NOT MATCHED AND a.op = 'insert' THEN
      INSERT (env_id, workflow_id, seq, step, attempt, generation, kind, state, input, output, error, idempotency_key, finished_at)
      VALUES (env, wf, a.seq, a.step, a.attempt, a.generation, a.kind, a.state, a.input, a.output, a.error,
              a."idempotencyKey", CASE WHEN a.state = 'running' THEN NULL ELSE now() END);
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> jsonb_array_length(p->'attempts') THEN
      RAISE EXCEPTION 'workflow %: % of its attempt writes found no row to finish or a row already there', wf, jsonb_array_length(p->'attempts') - n
        USING ERRCODE = 'data_exception';
    END IF;
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
           coalesce(t.at, now() + t."delayMs" * interval '1 millisecond'), jsonb_build_object('seq', t.seq)
    FROM jsonb_to_recordset(p->'timers') AS t(purpose text, "delayMs" float8, at timestamptz, seq int);
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
