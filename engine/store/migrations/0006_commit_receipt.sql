-- 0006: a commit leaves a receipt, so a worker whose acknowledgement was lost can tell its own
-- commit from a fence.
--
-- Why: when the connection drops after commit_transition() committed, the worker retries; the
-- row_version guard then matches nothing, exactly as when another worker or a verb moved the row.
-- Taking that for a fence, the worker dropped an instance whose lease it still held, and the
-- instance stalled for a whole lease. Each commit now records who wrote it — the committing
-- worker's lease token (NULL for verbs) — and the row version it wrote. The retry that finds the
-- guard moved asks for its receipt (commit_landed()): the row carries its token at the version
-- its commit wrote, or the row was moved by someone else. A later commit overwrites the receipt;
-- claims, timers and heartbeats leave it alone.

ALTER TABLE workflows ADD COLUMN commit_token uuid, ADD COLUMN commit_version bigint;

-- As in 0003, plus the receipt: `commit_token` from p->>'by', `commit_version` the row version written.
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
    commit_token = (p->>'by')::uuid,
    commit_version = row_version + 1,
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
