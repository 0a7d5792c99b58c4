/** `sentin8-flow/testing`: run workflows in process against fakes, on a virtual clock, and replay their traces. */
export type { ResumeArgs } from '../core/wake.ts';
export { type Fake, type FakeCall, fakes, unreliableDelivery } from './fakes.ts';
export {
  type EventOptions,
  type EventSent,
  type FlowHandle,
  fakeKey,
  type MessageSent,
  type MigrateOptions,
  hostFakeKey,
  type OutboxCommand,
  type RunnerOptions,
  type RunOptions,
  type RunResult,
  TestRunner,
  type VirtualTimer,
} from './runner.ts';
export { exportTrace, TRACE_FORMAT } from '../runtime/export-trace.ts';
export {
  apply,
  type Decision,
  type DivergenceDetails,
  decisionOf,
  type FinalRecord,
  firstDifference,
  ReplayDivergence,
  type Replayed,
  replay,
  type Trace,
  type TraceEntry,
  type TraceEvent,
} from './trace.ts';
