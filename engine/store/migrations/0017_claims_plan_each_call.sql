-- 0017: the claim and the timer poll plan their statements on every call.
--
-- Why: both look up each leased instance's step outputs in workflow_outputs by workflow_id. A
-- PL/pgSQL function keeps the plan of each statement for its session, and after five calls it
-- settles on a generic plan, made with the table statistics of that moment. When those said
-- workflow_outputs was empty (an ANALYZE before the first step ended, as after a deployment or a
-- restore), the generic plan reads the whole table for every instance leased, and goes on doing
-- so as the table grows, until autovacuum analyzes it again (after 50 rows and 10% have changed,
-- at most once a minute). Measured in
-- `npm run bench:timers` (a 10,000-timer burst, stats taken before any output existed): each
-- claim of 32 instances took 16 ms on average, 0.5-2.8 ms a lookup, 5.3 s of a 13 s burst.
-- Planned on each call, the lookup sees the table's current size and uses its primary key.
-- Planning costs a fraction of a millisecond once per claim or poll, not per instance. A later
-- migration that replaces either function (CREATE OR REPLACE) drops this setting: restate it.

ALTER FUNCTION claim_workflows(integer, float8) SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION fire_due_timers(integer, integer, float8) SET plan_cache_mode = force_custom_plan;
