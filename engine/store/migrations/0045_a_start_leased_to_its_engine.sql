-- 0045: a start may lease its instance to the process that started it.
--
-- Why: a started instance waited for a claim, even when the engine that started it had an
-- executor free: the start committed, woke the local claim loop, and the claim (a statement of
-- its own, the heaviest the engine sends) leased it back. On this machine that was 1.8-2.1 ms of
-- the 5 ms from start() to the first call reaching the service (the goal: start-to-first-call
-- within 1 ms of the start's commit).
--
-- Now the row may carry a lease: `w.leaseToken` and `w.leaseMs`, with `w.state` 'processing', as
-- a claim would leave it. The engine then drives it straight after the commit. Only a start
-- whose instance is due now and whose engine has room asks for that; any other start is left
-- to a claim as before. A lease nobody drives (the process died after the commit) runs out and
-- the instance is claimed like any other whose holder died.

CREATE OR REPLACE FUNCTION insert_started(w jsonb, effects jsonb, j jsonb)
RETURNS TABLE (id uuid, created boolean, request_hash text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  wf   uuid;
  born timestamptz;
BEGIN
  INSERT INTO workflows AS x (id, env_id, domain, logic_id, version, logic_hash, state, input, output, current_step, error,
                              generation, ctx, correlation_id, idempotency_key, parent_id, branch_index, run_at, callback_url,
                              request_hash, trace_parent, priority, lease_token, lease_expires_at)
  VALUES ((w->>'id')::uuid, w->>'env', w->>'domain', w->>'logicId', (w->>'version')::integer, w->>'logicHash', w->>'state',
          w->'input', w->'output', w->>'currentStep', nullif(w->'error', 'null'::jsonb), (w->>'generation')::integer, w->'ctx',
          w->>'correlationId', w->>'idempotencyKey', (w->>'parentId')::uuid, (w->>'branchIndex')::integer,
          now() + coalesce((w->>'runAfterMs')::float8, 0) * interval '1 millisecond', w->>'callbackUrl',
          w->>'requestHash', w->>'traceParent', coalesce((w->>'priority')::integer, 0),
          (w->>'leaseToken')::uuid, now() + (w->>'leaseMs')::float8 * interval '1 millisecond')
  ON CONFLICT (env_id, logic_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
  RETURNING x.id, x.created_at INTO wf, born;
  IF wf IS NULL THEN
    RETURN QUERY SELECT x.id, false, x.request_hash FROM workflows x
                 WHERE x.logic_id = w->>'logicId' AND x.idempotency_key = w->>'idempotencyKey';
    RETURN;
  END IF;
  PERFORM write_effects_at(wf, w->>'env', effects, born);
  IF j IS NOT NULL THEN
    INSERT INTO journal (env_id, workflow_id, n, from_state, event, decision, initial, born)
    VALUES (w->>'env', wf, (j->>'n')::bigint, j->>'fromState', j->'event', j->'decision', coalesce(j->'initial', 'null'::jsonb), born);
  END IF;
  RETURN QUERY SELECT wf, true, w->>'requestHash';
END
$fn$;
