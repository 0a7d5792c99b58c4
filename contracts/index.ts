/**
 * Sentin8 Flow contracts: the shapes every other part agrees on.
 *
 * Terminology
 * - **LogicVersion**: one compiled, immutable workflow definition, identified by (logicId, version)
 *   and content-addressed by `hash`. See `logic-version.ts`.
 * - **Instance** (workflow): one run of a pinned LogicVersion, stored as a WorkflowRecord.
 * - **Step**: a named node of a LogicVersion; its `kind` picks the executor.
 * - **Attempt**: one try at running a step. Transient failures make new attempts, up to `retry.maxAttempts`.
 * - **Generation**: a counter on the instance, bumped by `repair` and `replayFrom`. It is part of
 *   every idempotency key, so re-running a step after a rewind calls the outside world afresh.
 * - **Lease**: a worker's time-limited claim on an instance (token + expiry). A worker whose lease
 *   was taken over is fenced out: its writes match no row.
 * - **Compensation**: the action registered (before a step runs) that undoes that step. On failure
 *   or cancel-with-compensate they run last-registered first.
 */
export * from './canonical-json.ts';
export * from './errors.ts';
export * from './expressions.ts';
export * from './http-headers.ts';
export * from './logic-version.ts';
export * from './record.ts';
export * from './states.ts';
export * from './validate.ts';
export * from './mermaid.ts';
