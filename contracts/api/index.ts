/**
 * The HTTP API v1 (ARCHITECTURE.md, Contracts: HTTP API) as zod schemas: the single source that validates requests in
 * `engine/api`, types `sentin8-flow/client`, and generates `GET /openapi.json`.
 */
export * from './callbacks.ts';
export * from './common.ts';
export * from './compatibility.ts';
export * from './decisions.ts';
export * from './messages.ts';
export * from './events.ts';
export * from './handlers.ts';
export * from './health.ts';
export * from './logic-versions.ts';
export * from './overview.ts';
export * from './problem.ts';
export * from './schedules.ts';
export * from './storable.ts';
export * from './verbs.ts';
export * from './workflows.ts';
export * from './history.ts';
export * from './attributes.ts';
export * from './limits.ts';
export * from './migrations.ts';
