import jsonata from 'jsonata';
import { ExpressionFailed } from './errors.ts';
import { copyJson } from './copy-json.ts';
import type { Instance, JsonValue } from './instance.ts';

const MAX_CACHED = 10_000;
const compiled = new Map<string, jsonata.Expression>();

/**
 * The evaluation budget of one expression (JSONata's `function(...)` definitions may recurse). Both are
 * counts, not a clock, so an expression meets the budget on every replay exactly as it did live.
 * - nesting depth: JSONata's own `stack` guard (D1011), well below Node's stack;
 * - evaluated nodes: counted by JSONata's entry hook on the evaluation's own frame, which stops
 *   tail recursion and long loops (measured on a shared two-core machine: ~0.7 s to reach it
 *   when idle, ~5 s under load; a `$map` over 60,000 items stays within it).
 */
export const EXPR_BUDGET = { depth: 500, nodes: 500_000 } as const;
const ENTRY_HOOK = Symbol.for('jsonata.__evaluate_entry');
const OVER_BUDGET = 'EXPR_BUDGET';

function countNode(_expr: unknown, _input: unknown, env: { base: { flowNodes?: number } }): void {
  const base = env.base;
  base.flowNodes = (base.flowNodes ?? 0) + 1;
  if (base.flowNodes > EXPR_BUDGET.nodes) {
    throw { code: OVER_BUDGET, message: `evaluated more than ${EXPR_BUDGET.nodes} expression nodes; look for a loop or a recursion that does not end` };
  }
}

function compile(expr: string): jsonata.Expression {
  let e = compiled.get(expr);
  if (e === undefined) {
    if (compiled.size >= MAX_CACHED) compiled.clear();
    e = jsonata(expr, { stack: EXPR_BUDGET.depth } as never);
    e.assign(ENTRY_HOOK as never, countNode);
    compiled.set(expr, e);
  }
  return e;
}

/**
 * Evaluates a JSONata expression of a LogicVersion against an instance's context. `field` names
 * the expression within its step (`input`, `payload`…) for the error when it fails. Compiled
 * expressions are cached by their text, so each is parsed once per process however many
 * instances use it. Results are normalised to plain JSON (undefined → null; JSONata's sequence
 * arrays lose their extra properties), which is what gets persisted and replayed. Throws only
 * ExpressionFailed.
 */
export async function evaluate(field: string, expr: string, inst: Instance, extra: Record<string, JsonValue> = {}): Promise<JsonValue> {
  return evaluateIn(field, expr, contextOf(inst, extra));
}

/** Evaluates an expression against a context that is not an instance's (a trigger's `{ event }`). */
export async function evaluateIn(field: string, expr: string, context: Record<string, JsonValue>): Promise<JsonValue> {
  try {
    const value = await compile(expr).evaluate(context);
    return value === undefined ? null : (JSON.parse(JSON.stringify(value)) as JsonValue);
  } catch (err) {
    throw failure(field, err);
  }
}

function failure(field: string, err: unknown): ExpressionFailed {
  const e = err as { code?: string; message?: string };
  // D1011: JSONata's depth guard; RangeError: Node's own stack, in case an evaluation got there first
  const overBudget = e.code === OVER_BUDGET || e.code === 'D1011' || err instanceof RangeError;
  const message = `${e.message ?? String(err)}${e.code === undefined || e.code === OVER_BUDGET ? '' : ` [${e.code}]`}`;
  return new ExpressionFailed(field, overBudget ? 'FLOW_EXPR_BUDGET_EXCEEDED' : 'FLOW_EXPR_FAILED', message);
}

export function contextOf(inst: Instance, extra: Record<string, JsonValue> = {}): Record<string, JsonValue> {
  return {
    input: inst.input,
    steps: copiedOnRead(inst.ctx.outputs),
    workflow: {
      id: inst.id,
      env: inst.env,
      logicId: inst.logicId,
      version: inst.version,
      correlationId: inst.correlationId,
    },
    // absent, not null, where no decision precedes: `$exists(decision)` must say false
    ...(inst.ctx.decision === null ? {} : { decision: inst.ctx.decision }),
    ...extra,
  };
}

/**
 * The outputs as an expression sees them: each one a copy, made when the expression first reads
 * it. JSONata writes to the values it evaluates: it flags an array it returns from a path
 * (`keepSingleton`, for `x[]`) in place. Outputs are shared between an instance and every
 * transition made from it (Draft copies their map, not them), so none may change; copying only
 * what is read keeps an evaluation's cost independent of how many steps ran before.
 */
function copiedOnRead(outputs: Record<string, JsonValue>): Record<string, JsonValue> {
  const copies = new Map<string, JsonValue>();
  const copy = (step: string): JsonValue => {
    if (!copies.has(step)) copies.set(step, copyJson(outputs[step]!));
    return copies.get(step)!;
  };
  return new Proxy(outputs, {
    get: (target, key) => (typeof key === 'string' && Object.hasOwn(target, key) ? copy(key) : Reflect.get(target, key)),
    getOwnPropertyDescriptor: (target, key) => {
      const d = Reflect.getOwnPropertyDescriptor(target, key);
      return d !== undefined && typeof key === 'string' ? { ...d, value: copy(key) } : d;
    },
  });
}
