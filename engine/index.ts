/**
 * `sentin8-flow/engine`: the Engine for embedding and tests, the store it runs on, and the HTTP
 * API in front of it. Owning services talk to a running engine with `sentin8-flow/client`.
 */
export { type Api, type ApiOptions, buildApi } from './api/server.ts';
export type { AuthOptions, Principal } from './api/auth.ts';
export { type EngineOptions, Engine } from './runtime/engine.ts';
export type { Actor, VerbOptions } from './runtime/operations.ts';
export { engineOptionsFrom, type FlowConfig, loadConfig } from './config.ts';
export { type Db, type OpenDbOptions, openDb } from './store/db.ts';
export { migrate } from './store/migrate.ts';
