-- 0005: a start's idempotency key stands for one request.
--
-- Why: a start that reused an idempotency key with a different request (other input, logicId,
-- version, correlation id or callback) silently got the first instance back, as if it had
-- started what it asked for. The hash of the first request (sha256 of the canonical JSON of the
-- normalised request, engine/runtime/start-instance.ts) is kept with the instance, so a repeat can
-- be told from a different request under the same key, which is refused
-- (FLOW_IDEMPOTENCY_MISMATCH). Instances started before this migration have none: their keys keep
-- answering any request, as before.

ALTER TABLE workflows ADD COLUMN request_hash text;
