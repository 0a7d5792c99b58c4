-- 0030: history partitioned by week, legal holds, and what retention and erasure need.
--
-- Why: every instance, attempt and journal row was kept for ever, and deleting them row by row
-- leaves dead tuples: the tables never shrink on disk. The per-step bulk lives in journal (one row
-- per transition) and step_runs (one per attempt); both are now range-partitioned on `born`, the
-- creation time of the instance the row belongs to, one partition per UTC week (Monday to Monday).
-- All rows of an instance sit in one partition, so once every instance created in a week has
-- ended, is past its retention and is not held, retention drops that week's partitions whole and
-- the disk is given back at once. Instances it cannot drop that way (a week with a live or held
-- instance, the default partition) lose their rows by delete.
--
-- The live commit still writes each row with one statement: commit_transition_at() answers the
-- instance's created_at from the UPDATE it already does (RETURNING), so the journal insert and the
-- step_runs MERGE name their partition without a lookup, and the MERGE is pruned to it. The
-- history tables no longer carry a foreign key to workflows: it cost an index probe on every
-- insert and turned every instance removal into a probe of every partition; the rows are only
-- ever written by the statement that has just updated their instance, and retention removes
-- them with it. workflow_outputs (one row per step, the latest output, read by every claim) stays
-- as it is: its rows go by delete and their space is reused.
--
-- A default partition takes rows whose week has no partition yet (the engine creates them ahead,
-- ensure_history_partitions()); a week the default already holds rows for is not created later
-- (Postgres would refuse), and those instances go by delete.

-- Creates the weekly partitions of journal and step_runs from `since`'s week through `through`'s.
CREATE FUNCTION ensure_history_partitions(since timestamptz, through timestamptz) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
  wk      timestamptz := date_trunc('week', since AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
  tbl     text;
  made    integer := 0;
BEGIN
  WHILE wk <= through LOOP
    FOREACH tbl IN ARRAY ARRAY['journal', 'step_runs'] LOOP
      IF to_regclass(format('%I', tbl || '_p' || to_char(wk AT TIME ZONE 'UTC', 'YYYYMMDD'))) IS NULL THEN
        BEGIN
          EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                         tbl || '_p' || to_char(wk AT TIME ZONE 'UTC', 'YYYYMMDD'), tbl, wk, wk + interval '7 days');
          -- read through the parent, whose policies apply; read directly, a partition shows nothing
          EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY',
                         tbl || '_p' || to_char(wk AT TIME ZONE 'UTC', 'YYYYMMDD'));
          made := made + 1;
        EXCEPTION WHEN check_violation THEN
          -- the default partition already holds rows of that week: they stay there
          NULL;
        END;
      END IF;
    END LOOP;
    wk := wk + interval '7 days';
  END LOOP;
  RETURN made;
END
$fn$;

-- The week partitions of journal and step_runs: name, table, and the week's bounds.
CREATE FUNCTION history_partitions() RETURNS TABLE (name text, parent text, lo timestamptz, hi timestamptz)
LANGUAGE sql STABLE AS $fn$
  SELECT c.relname::text, p.relname::text,
         (to_date(right(c.relname, 8), 'YYYYMMDD')::timestamp AT TIME ZONE 'UTC'),
         (to_date(right(c.relname, 8), 'YYYYMMDD')::timestamp AT TIME ZONE 'UTC') + interval '7 days'
  FROM pg_inherits i
  JOIN pg_class c ON c.oid = i.inhrelid
  JOIN pg_class p ON p.oid = i.inhparent
  WHERE p.relname IN ('journal', 'step_runs')
    AND p.relnamespace = to_regnamespace(current_schema())
    AND c.relname ~ '_p[0-9]{8}$'
$fn$;

-- The migrator may own the tables without being a superuser, and FORCE'd row-level security
-- would hide every row from it: lifted for this transaction, as 0011 did.
ALTER TABLE workflows NO FORCE ROW LEVEL SECURITY;
ALTER TABLE journal NO FORCE ROW LEVEL SECURITY;
ALTER TABLE step_runs NO FORCE ROW LEVEL SECURITY;

ALTER TABLE journal RENAME TO journal_unpartitioned;
ALTER TABLE journal_unpartitioned RENAME CONSTRAINT journal_pkey TO journal_unpartitioned_pkey;
ALTER TABLE step_runs RENAME TO step_runs_unpartitioned;
ALTER TABLE step_runs_unpartitioned RENAME CONSTRAINT step_runs_pkey TO step_runs_unpartitioned_pkey;

CREATE TABLE journal (
  env_id      text        NOT NULL,
  workflow_id uuid        NOT NULL,
  n           bigint      NOT NULL,
  from_state  text        NOT NULL,
  event       jsonb       NOT NULL,
  decision    jsonb       NOT NULL,
  initial     jsonb,
  at          timestamptz NOT NULL DEFAULT now(),
  -- the instance's created_at: which week's partition the row lives in
  born        timestamptz NOT NULL,
  PRIMARY KEY (workflow_id, n, born)
) PARTITION BY RANGE (born);
CREATE TABLE journal_default PARTITION OF journal DEFAULT;
ALTER TABLE journal_default ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE TABLE step_runs (
  env_id          text        NOT NULL,
  workflow_id     uuid        NOT NULL,
  seq             integer     NOT NULL,
  step            text        NOT NULL,
  attempt         integer     NOT NULL,
  generation      integer     NOT NULL,
  kind            text        NOT NULL CHECK (kind IN ('step', 'compensation')),
  state           text        NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'parked', 'superseded')),
  input           jsonb,
  output          jsonb,
  error           jsonb,
  idempotency_key text,
  started_at      timestamptz NOT NULL DEFAULT now(),
  finished_at     timestamptz,
  born            timestamptz NOT NULL,
  PRIMARY KEY (workflow_id, seq, born)
) PARTITION BY RANGE (born);
CREATE TABLE step_runs_default PARTITION OF step_runs DEFAULT;
ALTER TABLE step_runs_default ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

SELECT ensure_history_partitions(coalesce((SELECT min(created_at) FROM workflows), now()), now() + interval '14 days');

INSERT INTO journal (env_id, workflow_id, n, from_state, event, decision, initial, at, born)
SELECT j.env_id, j.workflow_id, j.n, j.from_state, j.event, j.decision, j.initial, j.at, w.created_at
FROM journal_unpartitioned j JOIN workflows w ON w.id = j.workflow_id;
INSERT INTO step_runs (env_id, workflow_id, seq, step, attempt, generation, kind, state, input, output, error,
                       idempotency_key, started_at, finished_at, born)
SELECT s.env_id, s.workflow_id, s.seq, s.step, s.attempt, s.generation, s.kind, s.state, s.input, s.output, s.error,
       s.idempotency_key, s.started_at, s.finished_at, w.created_at
FROM step_runs_unpartitioned s JOIN workflows w ON w.id = s.workflow_id;
DROP TABLE journal_unpartitioned;
DROP TABLE step_runs_unpartitioned;

ALTER TABLE workflows FORCE ROW LEVEL SECURITY;
ALTER TABLE journal ENABLE ROW LEVEL SECURITY;
ALTER TABLE journal FORCE ROW LEVEL SECURITY;
CREATE POLICY env_isolation ON journal TO flow_app
  USING (env_id = current_setting('app.env_id', true)) WITH CHECK (env_id = current_setting('app.env_id', true));
CREATE POLICY scheduler ON journal TO flow_engine USING (true) WITH CHECK (true);
-- the journal stays append-only for requests; erasure and retention act as the scheduler
GRANT SELECT, INSERT ON journal TO flow_app, flow_engine;
GRANT UPDATE (event, decision, initial), DELETE ON journal TO flow_engine;
ALTER TABLE step_runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE step_runs FORCE ROW LEVEL SECURITY;
CREATE POLICY env_isolation ON step_runs TO flow_app
  USING (env_id = current_setting('app.env_id', true)) WITH CHECK (env_id = current_setting('app.env_id', true));
CREATE POLICY scheduler ON step_runs TO flow_engine USING (true) WITH CHECK (true);
GRANT SELECT, INSERT, UPDATE, DELETE ON step_runs TO flow_app, flow_engine;

-- Legal holds: an instance held here is never removed by retention.
CREATE TABLE legal_holds (
  env_id      text        NOT NULL,
  workflow_id uuid        PRIMARY KEY REFERENCES workflows (id) ON DELETE CASCADE,
  actor       text        NOT NULL,
  reason      text        NOT NULL,
  at          timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE legal_holds ENABLE ROW LEVEL SECURITY;
ALTER TABLE legal_holds FORCE ROW LEVEL SECURITY;
CREATE POLICY env_isolation ON legal_holds TO flow_app
  USING (env_id = current_setting('app.env_id', true)) WITH CHECK (env_id = current_setting('app.env_id', true));
CREATE POLICY scheduler ON legal_holds TO flow_engine USING (true) WITH CHECK (true);
GRANT SELECT, INSERT, DELETE ON legal_holds TO flow_app, flow_engine;
-- retention removes an instance's audit rows with it
GRANT DELETE ON audit TO flow_engine;

-- commit_transition(p) as in 0014, answering the instance's created_at (NULL when it wrote
-- nothing) so its callers name the history partition without reading the row again.
CREATE FUNCTION commit_transition_at(p jsonb) RETURNS timestamptz
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role text := current_setting('role');
  prev_env  text := coalesce(current_setting('app.env_id', true), '');
  born      timestamptz;
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
    commit_token = (p->>'by')::uuid,
    commit_version = row_version + 1,
    updated_at = now(),
    run_at = CASE WHEN p->>'leaseToken' IS NOT NULL AND p->>'runAfterMs' IS NULL THEN run_at
                  ELSE now() + coalesce((p->>'runAfterMs')::float8, 0) * interval '1 millisecond' END,
    lease_token = (p->>'leaseToken')::uuid,
    lease_expires_at = CASE WHEN p->>'leaseToken' IS NULL THEN NULL
                            ELSE now() + (p->>'leaseMs')::float8 * interval '1 millisecond' END
  WHERE id = (p->>'id')::uuid AND row_version = (p->>'rowVersion')::bigint AND state = p->>'fromState'
  RETURNING created_at INTO born;
  IF born IS NOT NULL THEN
    PERFORM write_effects_at((p->>'id')::uuid, p->>'env', p, born);
  END IF;
  PERFORM set_config('role', prev_role, true), set_config('app.env_id', prev_env, true);
  RETURN born;
END
$fn$;

CREATE OR REPLACE FUNCTION commit_transition(p jsonb) RETURNS integer
LANGUAGE plpgsql AS $fn$
BEGIN
  RETURN CASE WHEN commit_transition_at(p) IS NULL THEN 0 ELSE 1 END;
END
$fn$;

CREATE OR REPLACE FUNCTION commit_journaled(p jsonb) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role text;
  prev_env  text;
  born      timestamptz := commit_transition_at(p);
BEGIN
  IF born IS NULL THEN
    RETURN 0;
  END IF;
  IF p ? 'journal' THEN
    prev_role := current_setting('role');
    prev_env := coalesce(current_setting('app.env_id', true), '');
    PERFORM set_config('app.env_id', p->>'env', true), set_config('role', 'flow_app', true);
    INSERT INTO journal (env_id, workflow_id, n, from_state, event, decision, initial, born)
    VALUES (p->>'env', (p->>'id')::uuid, (p->'journal'->>'n')::bigint, p->'journal'->>'fromState',
            p->'journal'->'event', p->'journal'->'decision', p->'journal'->'initial', born);
    PERFORM set_config('role', prev_role, true), set_config('app.env_id', prev_env, true);
  END IF;
  RETURN 1;
END
$fn$;

-- write_effects() as in 0016, with the instance's created_at: step_runs rows go to (and are
-- found in) that week's partition.
CREATE FUNCTION write_effects_at(wf uuid, env text, p jsonb, born timestamptz) RETURNS void
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

-- The three-argument form, for the insert of a new instance (its row is already there to read).
CREATE OR REPLACE FUNCTION write_effects(wf uuid, env text, p jsonb) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM write_effects_at(wf, env, p, (SELECT created_at FROM workflows WHERE id = wf));
END
$fn$;

GRANT EXECUTE ON FUNCTION commit_transition_at(jsonb), write_effects_at(uuid, text, jsonb, timestamptz) TO flow_app, flow_engine;
