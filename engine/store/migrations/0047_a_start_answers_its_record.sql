-- 0047: the record an API start answers, read in the statement that starts.
--
-- Why: POST /workflows answers the instance's WorkflowRecord. After 0046 an in-process start was
-- one statement, but the API's was still four: BEGIN with the env, insert_started(), the read of
-- the record, COMMIT. On this machine that cost 2.3 ms of Postgres CPU a start against 1.0 for
-- the single statement, and the API's goal is 0.8 of in-process starts.
--
-- workflow_record(id) is the WorkflowRecord (contracts/record.ts), built here once: the instance's
-- columns, every attempt of this incarnation in order, the compensations its ctx registered and
-- its search attributes (absent when it has none). Times are ISO 8601 instants in UTC to the
-- millisecond, as a JavaScript Date prints them. It reads under the caller's env scope. PL/pgSQL,
-- not SQL: a SQL function that is not inlined is planned again on every call. JSON, not JSONB:
-- it is made to be sent, and keeps the order of its keys.
--
-- insert_started() with a pin answers it beside the start when the pin asks (`"record": true`):
-- for a new instance and for the one an idempotency key found. The function's result gains a
-- column; an engine of an earlier version selects the three it knows and is unaffected.

CREATE FUNCTION workflow_record(wid uuid) RETURNS json
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  rec json;
  attributes jsonb;
BEGIN
  -- row_to_json of rows whose columns carry the record's names: half the cost of building the
  -- same objects key by key (json_build_object, jsonb_build_object)
  SELECT row_to_json(x) INTO rec FROM (
    SELECT w.id, w.env_id AS env, w.domain, w.logic_id AS "logicId", w.version, w.logic_hash AS "logicHash",
           w.state, w.input, w.output, w.current_step AS "currentStep", w.error, w.generation,
           w.correlation_id AS "correlationId", w.parent_id AS "parentId", w.branch_index AS "branchIndex",
           to_char(w.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS "createdAt",
           to_char(w.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS "updatedAt",
           coalesce((
             SELECT json_agg((
                      SELECT row_to_json(s) FROM (
                        SELECT r.step, r.kind, r.attempt, r.generation, r.state, r.input, r.output, r.error,
                               r.idempotency_key AS "idempotencyKey",
                               to_char(r.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS "startedAt",
                               to_char(r.finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS "finishedAt") s)
                    ORDER BY r.seq)
               FROM step_runs r WHERE r.workflow_id = w.id AND r.born = w.created_at), '[]') AS steps,
           coalesce((
             SELECT json_agg(json_build_object('step', c->'step', 'generation', c->'generation', 'state', c->'state',
                                               'attempts', c->'attempts', 'error', coalesce(c->'error', 'null')) ORDER BY n)
               FROM jsonb_array_elements(w.ctx->'compensations') WITH ORDINALITY AS e(c, n)), '[]') AS compensations
      FROM workflows w WHERE w.id = wid) x;
  SELECT jsonb_object_agg(a.name, coalesce(to_jsonb(a.text_value), to_jsonb(a.num_value),
           to_jsonb(to_char(a.time_value AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))))
    INTO attributes FROM workflow_attributes a WHERE a.workflow_id = wid;
  -- the key only when it has some; spliced before the object's closing brace, keeping its order
  IF attributes IS NOT NULL THEN rec := left(rec::text, -1) || ',"attributes":' || attributes::text || '}'; END IF;
  RETURN rec;
END
$fn$;

DROP FUNCTION insert_started(jsonb, jsonb, jsonb, jsonb);

CREATE FUNCTION insert_started(w jsonb, effects jsonb, j jsonb, pin jsonb)
RETURNS TABLE (id uuid, created boolean, request_hash text, record json)
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role text := current_setting('role');
  prev_env  text := coalesce(current_setting('app.env_id', true), '');
  startable boolean;
BEGIN
  PERFORM set_config('app.env_id', w->>'env', true), set_config('role', 'flow_app', true);
  -- what a start's lookup reads: the version asked for, else the highest, an active one first
  SELECT v.active AND v.hash = pin->>'hash' INTO startable FROM logic_versions v
  WHERE v.logic_id = pin->>'logicId' AND ((pin->>'version') IS NULL OR v.version = (pin->>'version')::integer)
  ORDER BY v.active DESC, v.version DESC LIMIT 1;
  IF startable THEN
    SELECT s.id, s.created, s.request_hash INTO id, created, request_hash FROM insert_started(w, effects, j) s;
    -- a statement of its own: it sees the rows the insert wrote
    IF coalesce((pin->>'record')::boolean, false) THEN record := workflow_record(id); END IF;
    RETURN NEXT;
  END IF;
  PERFORM set_config('role', prev_role, true), set_config('app.env_id', prev_env, true);
END
$fn$;
