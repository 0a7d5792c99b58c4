import jsonata from 'jsonata';
import type { Instance, JsonValue } from './instance.ts';

const MAX_CACHED = 10_000;
const compiled = new Map<string, jsonata.Expression>();

/**
 * Evaluates a JSONata expression of a LogicVersion against an instance's context. Compiled
 * expressions are cached by their text, so each is parsed once per process however many
 * instances use it. Results are normalised to plain JSON (undefined → null; JSONata's sequence
 * arrays lose their extra properties), which is what gets persisted and replayed.
 */
export async function evaluate(expr: string, inst: Instance, extra: Record<string, JsonValue> = {}): Promise<JsonValue> {
  return evaluateIn(expr, contextOf(inst, extra));
}

/** Evaluates an expression against a context that is not an instance's (a trigger's `{ event }`). */
export async function evaluateIn(expr: string, context: Record<string, JsonValue>): Promise<JsonValue> {
  let e = compiled.get(expr);
  if (e === undefined) {
    if (compiled.size >= MAX_CACHED) compiled.clear();
    e = jsonata(expr);
    compiled.set(expr, e);
  }
  const value = await e.evaluate(context);
  return value === undefined ? null : (JSON.parse(JSON.stringify(value)) as JsonValue);
}

export function contextOf(inst: Instance, extra: Record<string, JsonValue> = {}): Record<string, JsonValue> {
  return {
    input: inst.input,
    steps: inst.ctx.outputs,
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
