import { Node } from '../ts-morph.ts';
import { CompileErrorCode } from '../errors.ts';
import { arrowBody } from './calls.ts';
import { ExprError } from './expr-error.ts';
import { bindContextParameter, Scope } from './scope.ts';
import { createTranslator } from './translate-node.ts';

export { SUPPORTED_HELPERS } from './calls.ts';
export { ExprError } from './expr-error.ts';

/** Context fields of step mappings (ARCHITECTURE.md, Contracts: LogicVersion). */
export const STEP_ROOTS = ['input', 'steps', 'workflow', 'decision', 'item', 'index'] as const;
/** Context fields of a step's attribute mappings: the step context and the step's own output. */
export const ATTRIBUTE_ROOTS = [...STEP_ROOTS, 'output'] as const;
/** Context fields of a trigger's input mapping: the event payload. */
export const TRIGGER_ROOTS = ['event'] as const;

/**
 * Translates a mapping — an arrow function `(ctx) => expr` — into a JSONata expression over the
 * evaluation context. Throws `ExprError` at the first unsupported construct.
 */
export function translateMapping(fn: Node, roots: readonly string[]): string {
  if (!Node.isArrowFunction(fn)) {
    throw new ExprError(CompileErrorCode.exprFunction, fn, 'a mapping must be an arrow function', 'write it as ({ input, steps }) => …');
  }
  if (fn.isAsync()) throw new ExprError(CompileErrorCode.exprAsync, fn, 'a mapping cannot be async');
  const params = fn.getParameters();
  if (params.length > 1) {
    throw new ExprError(CompileErrorCode.exprParameter, params[1]!, 'a mapping takes one parameter: the context');
  }
  const bindings = params[0] === undefined ? [] : bindContextParameter(params[0], roots);
  return createTranslator(new Scope(new Map(bindings))).expr(arrowBody(fn)).code;
}
