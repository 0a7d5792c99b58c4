/** `sentin8-flow/testing`: run workflows in process against fakes, and replay their traces. */
export { type Fake, type FakeCall, fakes } from './fakes.ts';
export { fakeKey, type RunOptions, type RunResult, TestRunner } from './runner.ts';
export { type Decision, ReplayDivergence, replay, type Trace, type TraceEntry, type TraceEvent } from './trace.ts';
