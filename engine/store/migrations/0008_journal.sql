-- 0008: the journal — every input the core got for an instance, with what it decided.
--
-- Why: step_runs keep what each attempt did, but not what the core was told (a failure's
-- `retryable`, a decision's approver, which timer fired, what the children looked like at
-- fan-in, an operator verb's arguments). Without those an instance cannot be replayed, so a
-- production run could not become a regression test. One row per committed transition, written
-- by the statement that commits it (commit_journaled), keyed by the row_version it produced.

CREATE TABLE journal (
  env_id      text        NOT NULL,
  workflow_id uuid        NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
  -- the workflows.row_version this transition wrote: orders the rows, and a transition that was
  -- fenced out (matched no row) writes none
  n           bigint      NOT NULL,
  -- the state the instance had in the store when the event was applied
  from_state  text        NOT NULL,
  event       jsonb       NOT NULL,
  decision    jsonb       NOT NULL,
  -- on the first row (the instance began) only: the instance as it was created, which later
  -- rows cannot tell (a repair may replace the workflow input)
  initial     jsonb,
  at          timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workflow_id, n)
);

ALTER TABLE journal ENABLE ROW LEVEL SECURITY;
ALTER TABLE journal FORCE ROW LEVEL SECURITY;
CREATE POLICY env_isolation ON journal TO flow_app
  USING (env_id = current_setting('app.env_id', true)) WITH CHECK (env_id = current_setting('app.env_id', true));
CREATE POLICY scheduler ON journal TO flow_engine USING (true) WITH CHECK (true);
GRANT SELECT, INSERT ON journal TO flow_app, flow_engine;

-- commit_transition(p) (0002/0003), then — only when it wrote — the journal row from p->'journal'
-- ({ n, fromState, event, decision, initial? }), in the same statement and transaction: one round trip.
CREATE FUNCTION commit_journaled(p jsonb) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role text;
  prev_env  text;
  n         integer := commit_transition(p);
BEGIN
  IF n = 1 AND p ? 'journal' THEN
    prev_role := current_setting('role');
    prev_env := coalesce(current_setting('app.env_id', true), '');
    PERFORM set_config('app.env_id', p->>'env', true), set_config('role', 'flow_app', true);
    INSERT INTO journal (env_id, workflow_id, n, from_state, event, decision, initial)
    VALUES (p->>'env', (p->>'id')::uuid, (p->'journal'->>'n')::bigint, p->'journal'->>'fromState',
            p->'journal'->'event', p->'journal'->'decision', p->'journal'->'initial');
    PERFORM set_config('role', prev_role, true), set_config('app.env_id', prev_env, true);
  END IF;
  RETURN n;
END
$fn$;

GRANT EXECUTE ON FUNCTION commit_journaled(jsonb) TO flow_app, flow_engine;
