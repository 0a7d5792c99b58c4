-- 0040: a step's commit finds its instance by id, whatever the planner knows of the table, and
-- its statements are planned once per session, not on every commit.
--
-- Why: commit_transition_at() updated `WHERE id = … AND row_version = … AND state = fromState`,
-- and under row-level security the policy adds `env_id = current_setting('app.env_id')`. Before
-- the table had statistics (a new deployment, the first minute of a bench) the planner costed
-- the primary key and the (env_id, …, state) indexes the same, and took the partial index
-- workflows_live: every commit then walked all of the env's instances in that state to find its
-- own (127 rows removed by the filter in one commit of a 1,000-in-flight run, auto_explain), so a
-- step's commit grew with the instances in flight. The state is still checked, but in a form no
-- index can serve (IS NOT DISTINCT FROM; state is never null), so the primary key is the only
-- access path left.
CREATE OR REPLACE FUNCTION commit_transition_at(p jsonb) RETURNS timestamptz
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
  WHERE id = (p->>'id')::uuid AND row_version = (p->>'rowVersion')::bigint
    AND state IS NOT DISTINCT FROM p->>'fromState'
  RETURNING created_at INTO born;
  IF born IS NOT NULL THEN
    PERFORM write_effects_at((p->>'id')::uuid, p->>'env', p, born);
  END IF;
  PERFORM set_config('role', prev_role, true), set_config('app.env_id', prev_env, true);
  RETURN born;
END
$fn$;

-- write_effects_at()'s statements on the partitioned step_runs (the attempts' MERGE) got a custom
-- plan on every call: a generic plan cannot prune partitions when it is made, so Postgres costed
-- it dearer and planned again each time (pg_stat_statements: 11,072 plans in 11,000 calls, 0.37 ms
-- of planning a step, more than the statement's own run). Each of its statements finds rows by
-- key, the parameters' values change no plan, and a generic plan prunes at executor start.
ALTER FUNCTION write_effects_at(uuid, text, jsonb, timestamptz) SET plan_cache_mode = force_generic_plan;
