-- 0046: a start in one round trip.
--
-- Why: a start was four: BEGIN with the env, the lookup of the version to start (its whole
-- document read and parsed on every start), insert_started(), COMMIT. On this machine that was
-- 1.9 ms from start() to its return, against 0.7 ms for a transaction of one UPDATE and one
-- INSERT; the goal is the first call within 1 ms of such a commit.
--
-- Now the engine keeps the version it last started for a definition, and this insert_started()
-- checks, in the statement that inserts, that the version is still the one a lookup would find:
-- for `pin.version` that version, else the highest; active, and with the hash the engine
-- computed the first transition from. When it is not (a version was published or retired since)
-- it inserts nothing and answers no row: the engine reads the version again and starts anew.
-- It scopes itself to the instance's env and the flow_app role, and restores the caller's on
-- the way out, as commit_transition() does, so it is a transaction of its own when sent alone.
-- The three-argument insert_started() stays, for a start inside a transaction of the caller's
-- and for engines of an earlier version during a rolling deploy.

CREATE FUNCTION insert_started(w jsonb, effects jsonb, j jsonb, pin jsonb)
RETURNS TABLE (id uuid, created boolean, request_hash text)
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
    RETURN QUERY SELECT s.id, s.created, s.request_hash FROM insert_started(w, effects, j) s;
  END IF;
  PERFORM set_config('role', prev_role, true), set_config('app.env_id', prev_env, true);
END
$fn$;
