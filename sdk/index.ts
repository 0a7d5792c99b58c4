/**
 * Sentin8 Flow SDK: typed, immutable builders for workflow definitions.
 *
 * Authors import this module (as `sentin8-flow/sdk`) and export workflow definitions; the compiler
 * (`s8flow compile`) turns each into a pinned, content-hashed LogicVersion. This module depends on
 * zod and contract types only, so an author's CI stays light.
 */
export type { AnyWorkflow, WorkflowBuilder, WorkflowInput, WorkflowOutput, WorkflowSteps } from './builder.ts';
export { WORKFLOW_BRAND } from './builder.ts';
export type {
  AddStep,
  DecisionResult,
  ItemContext,
  Mapping,
  NewStepName,
  StepContext,
  TriggerContext,
  WorkflowInfo,
} from './context.ts';
export type { DraftExpr, DraftModule, DraftStep, JsonSchemaDoc, WorkflowDraft } from './draft.ts';
export { FlowSdkError, SdkErrorCode } from './errors.ts';
export type * from './options.ts';
export { isWorkflow } from './is-workflow.ts';
export { type NoSteps, type WorkflowOptions, workflow } from './workflow.ts';
