import { type AnyWorkflow, WORKFLOW_BRAND } from './builder.ts';

/**
 * True for a workflow builder. Checks the global-symbol brand rather than `instanceof`, so that a
 * builder made by another copy of the SDK (for example inside a compiler's bundle) still counts.
 */
export function isWorkflow(value: unknown): value is AnyWorkflow {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[WORKFLOW_BRAND] === true;
}
