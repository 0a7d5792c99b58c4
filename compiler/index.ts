/**
 * The Sentin8 Flow compiler: typed SDK definitions → pinned, content-hashed LogicVersion artifacts
 * (`<logicId>@<version>.json`, `.mmd` diagrams, `modules/<sha256>.wasm`, `manifest.json`), guarded
 * by the version lock (flow.lock.json).
 */
export { type CompileOptions, type CompileResult, type CompilerSession, compile, createCompiler } from './session.ts';
export type { BuiltVersion } from './build-file.ts';
export { type Manifest, MANIFEST_SCHEMA } from './emit.ts';
export { CompileError, CompileErrorCode, type CompileDiagnostic, formatDiagnostic, PublishError, PublishErrorCode } from './errors.ts';
export { classifyChange, type Classification, type ChangeReason } from './lock/classify.ts';
export { shapeOf, type LockShape } from './lock/shape.ts';
export { mermaidDiagram } from '../contracts/mermaid.ts';
export { type PublishOptions, type PublishResult, publish } from './publish.ts';
export { STEP_ROOTS, SUPPORTED_HELPERS, translateMapping, TRIGGER_ROOTS } from './translate/index.ts';
export { watch, type WatchOptions } from './watch.ts';
export { COMPILER_VERSION } from './version.ts';
