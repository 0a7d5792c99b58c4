-- 0022: a start's idempotency key is unique per (env, logicId), not per env.
--
-- Why: every team of an env shared one key namespace. A team could squat a predictable key
-- (`order-42`) with a start of its own definition, so another team's start under that key was
-- refused, and the 409 named the squatter's instance (or, the other way round, told the squatter
-- the other team's workflow id). Keyed by definition, a key answers only starts of the same
-- logicId. Every existing row stays valid: keys unique per env are unique per (env, logicId) too.

CREATE UNIQUE INDEX workflows_idempotency_per_logic ON workflows (env_id, logic_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
DROP INDEX workflows_idempotency;
