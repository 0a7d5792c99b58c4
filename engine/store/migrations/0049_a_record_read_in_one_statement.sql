-- 0049: an instance's record read in one statement.
--
-- Why: a read of one record (GET /workflows/:id, and the record every verb, decision and callback
-- answers) was a transaction of its own: BEGIN with the env, workflow_record(), COMMIT, three
-- round trips for one read.
--
-- workflow_record(id, env) scopes itself to the env and the flow_app role, reads the record, and
-- restores the caller's scope, as insert_started() with a pin does: sent alone, it is a
-- transaction of its own, and row-level security decides what it finds (another env's instance
-- is not there).

CREATE FUNCTION workflow_record(wid uuid, env text) RETURNS json
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role text := current_setting('role');
  prev_env  text := coalesce(current_setting('app.env_id', true), '');
  rec       json;
BEGIN
  PERFORM set_config('app.env_id', env, true), set_config('role', 'flow_app', true);
  rec := workflow_record(wid);
  PERFORM set_config('role', prev_role, true), set_config('app.env_id', prev_env, true);
  RETURN rec;
END
$fn$;
