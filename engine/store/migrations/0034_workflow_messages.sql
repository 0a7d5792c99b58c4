-- 0034: messages to running instances. A waitFor step parks until a named message is delivered
-- (POST …/workflows/{id}/messages/{name}); a message that arrives before its step is reached waits
-- here, in arrival order, until the step takes it.
--
-- Why: a running instance could be told nothing but a decision or a 202 completion. A payment
-- waiting for "funds settled" from a ledger had no step to wait on, and a message sent a moment
-- too early had nowhere to go.
--
-- One row per delivery, keyed by the caller's Idempotency-Key within the instance: a repeat of the
-- key is answered with the answer the first delivery got (`answer_status`, `answer`), and changes
-- nothing. `state` says whether the message still waits for its step (`buffered`), was handed
-- to it (`consumed`), or was still waiting when its instance ended (`unread`, set by the sweep so
-- that it scans only messages that may yet be taken); the buffered ones of an instance are few (bounded by the engine's
-- FLOW_MESSAGE_BUFFER_MAX), taken oldest first per name (`id` is the arrival order). Every
-- delivery and hand-over takes the instance's row lock first, so they are serialised with each
-- other and with the instance's commits.

CREATE TABLE workflow_messages (
  id              bigserial   NOT NULL,
  env_id          text        NOT NULL,
  workflow_id     uuid        NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
  idempotency_key text        NOT NULL,
  name            text        NOT NULL,
  payload         jsonb       NOT NULL,
  state           text        NOT NULL CHECK (state IN ('buffered', 'consumed', 'unread')),
  answer_status   integer     NOT NULL,
  answer          jsonb       NOT NULL,
  arrived_at      timestamptz NOT NULL DEFAULT now(),
  consumed_at     timestamptz,
  PRIMARY KEY (workflow_id, idempotency_key)
);
-- what a hand-over looks for: an instance's oldest buffered message of a name
CREATE INDEX workflow_messages_buffered ON workflow_messages (workflow_id, name, id) WHERE state = 'buffered';

ALTER TABLE workflow_messages ENABLE ROW LEVEL SECURITY;
ALTER TABLE workflow_messages FORCE ROW LEVEL SECURITY;
CREATE POLICY env_isolation ON workflow_messages TO flow_app
  USING (env_id = current_setting('app.env_id', true))
  WITH CHECK (env_id = current_setting('app.env_id', true));
CREATE POLICY scheduler ON workflow_messages TO flow_engine USING (true) WITH CHECK (true);
GRANT SELECT, INSERT, UPDATE, DELETE ON workflow_messages TO flow_app, flow_engine;
GRANT USAGE ON SEQUENCE workflow_messages_id_seq TO flow_app, flow_engine;
