-- 0036: events delivered as messages to running instances by correlation.
--
-- Why: a message trigger (`triggers[]` with `message` and `match`) routes an event type to the live
-- instances whose correlationId or search attribute equals a value read from the event: a ledger's
-- `funds_settled` reaches the payment waiting on `funds.settled` without knowing its id.
--
-- * events.delivered: the messages an event delivered ([{ workflowId, message, status }]), so a
--   repeat of its key answers with what the first delivery did, as `started` does for the
--   instances it started. The per-instance message rows are keyed by a key derived from the
--   event's (workflow_messages), so no path delivers an event twice to one instance.
-- * workflows_correlation: finding the instances of a definition by correlationId is an index
--   range scan (the route, and the listing's correlationId filter), not a walk over every live
--   instance of the definition. Partial: most instances carry no correlationId.

ALTER TABLE events ADD COLUMN delivered jsonb NOT NULL DEFAULT '[]';

CREATE INDEX workflows_correlation ON workflows (env_id, logic_id, correlation_id) WHERE correlation_id IS NOT NULL;
