import jsonata from 'jsonata';
import { ExpressionFailed } from './errors.ts';
import { copyJson } from './copy-json.ts';
import type { Instance, JsonValue } from './instance.ts';

const MAX_CACHED = 10_000;
const compiled = new Map<string, jsonata.Expression>();

/**
 * The evaluation budget of one expression (JSONata's `function(...)` definitions may
 * recurse, and one node can build a huge value). All of it is counts, never a clock, so an expression meets the
 * budget on every replay exactly where it did live:
 * - `depth`: nesting, JSONata's own `stack` guard (D1011), well below Node's stack;
 * - `nodes`: evaluated nodes, counted by JSONata's entry hook on the evaluation's own frame,
 *   which stops tail recursion and long loops (a `$map` over 60,000 items stays within it);
 * - `items`: the work values cost: every array a node yields is charged its length (a path copies
 *   its sequence, `$map` builds one) and every string a function returns its length, so a loop
 *   over big values runs out long before it runs for long;
 * - `sequence`: the longest array one node may build, JSONata's `sequence` guard (D2015), which
 *   refuses a range (`[1..N]`) before allocating it;
 * - `string`: the longest string a node may yield; `$pad` is refused before it pads past it.
 * Every `yieldEvery` nodes the evaluation lets the event loop run (a macrotask turn): a long one
 * never holds the engine's thread for more than that many nodes at a time.
 */
export const EXPR_BUDGET = { depth: 500, nodes: 500_000, items: 20_000_000, sequence: 1_000_000, string: 2_000_000, yieldEvery: 10_000 } as const;
const ENTRY_HOOK = Symbol.for('jsonata.__evaluate_entry');
const EXIT_HOOK = Symbol.for('jsonata.__evaluate_exit');
const OVER_BUDGET = 'EXPR_BUDGET';

interface Counters {
  flowNodes?: number;
  flowItems?: number;
}

function overBudget(what: string): { code: string; message: string } {
  return { code: OVER_BUDGET, message: `${what}; look for a loop or a recursion that does not end, or move heavy work into a func step or a service` };
}

function countNode(_expr: unknown, _input: unknown, env: { base: Counters }): Promise<void> | undefined {
  const base = env.base;
  const nodes = (base.flowNodes ?? 0) + 1;
  base.flowNodes = nodes;
  if (nodes > EXPR_BUDGET.nodes) throw overBudget(`evaluated more than ${EXPR_BUDGET.nodes} expression nodes`);
  // a turn of the event loop, not a clock: where it happens never changes the result
  if (nodes % EXPR_BUDGET.yieldEvery === 0) return new Promise((resolve) => setImmediate(resolve));
  return undefined;
}

function chargeResult(expr: { type?: string }, _input: unknown, env: { base: Counters }, result: unknown): void {
  let size = 0;
  if (Array.isArray(result)) size = result.length;
  else if (typeof result === 'string') {
    if (result.length > EXPR_BUDGET.string) throw overBudget(`built a string of ${result.length} characters, more than ${EXPR_BUDGET.string}`);
    // a path hands out the string it found; a function made this one
    if (expr.type === 'function') size = result.length;
  }
  if (size === 0) return;
  const base = env.base;
  base.flowItems = (base.flowItems ?? 0) + size;
  if (base.flowItems > EXPR_BUDGET.items) throw overBudget(`built or copied more than ${EXPR_BUDGET.items} items and characters`);
}

/** `$pad` refused before it pads past the string cap (JSONata joins an array of that length). */
let builtinPad: { implementation: (str: unknown, width: number, char?: string) => unknown } | null = null;
function boundedPad(str: unknown, width: number, char?: string): unknown {
  if (Math.abs(width) > EXPR_BUDGET.string) throw overBudget(`$pad to ${width} characters, more than ${EXPR_BUDGET.string}`);
  return builtinPad!.implementation(str, width, char);
}

function compile(expr: string): jsonata.Expression {
  let e = compiled.get(expr);
  if (e === undefined) {
    if (compiled.size >= MAX_CACHED) compiled.clear();
    e = jsonata(expr, { stack: EXPR_BUDGET.depth, sequence: EXPR_BUDGET.sequence } as never);
    e.assign(ENTRY_HOOK as never, countNode);
    e.assign(EXIT_HOOK as never, chargeResult);
    e.registerFunction('pad', boundedPad as never, '<s-ns?:s>');
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
    builtinPad ??= (await jsonata('$pad').evaluate({})) as typeof builtinPad;
    const value = await compile(expr).evaluate(context);
    return value === undefined ? null : (JSON.parse(JSON.stringify(value)) as JsonValue);
  } catch (err) {
    throw failure(field, err);
  }
}

function failure(field: string, err: unknown): ExpressionFailed {
  const e = err as { code?: string; message?: string };
  // D1011: JSONata's depth guard; D2014/D2015: its range and sequence guards; RangeError: Node's
  // own stack or string length, in case an evaluation got there first
  const over = e.code === OVER_BUDGET || e.code === 'D1011' || e.code === 'D2014' || e.code === 'D2015' || err instanceof RangeError;
  const message = `${e.message ?? String(err)}${e.code === undefined || e.code === OVER_BUDGET ? '' : ` [${e.code}]`}`;
  return new ExpressionFailed(field, over ? 'FLOW_EXPR_BUDGET_EXCEEDED' : 'FLOW_EXPR_FAILED', message);
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
