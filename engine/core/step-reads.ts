import jsonata from 'jsonata';

/** One read of an earlier step's output by an expression: `steps.<step>…`. */
export interface StepRead {
  step: string;
  /**
   * The read only asks whether the output is there (`$exists(steps.x)`): a missing output is an
   * answer it expects, not a break.
   */
  probe: boolean;
}

const cache = new Map<string, StepRead[]>();
const MAX_CACHED = 10_000;

/**
 * The step outputs an expression reads: every path that starts `steps.<name>` (expressions see
 * outputs as `steps`, engine/core/expressions.ts). Reads by a computed name (`$lookup(steps, n)`)
 * are not seen. An expression that does not parse reads nothing here: a published version's
 * expressions all parse (contracts/validate.ts).
 */
export function stepReads(expr: string): StepRead[] {
  let reads = cache.get(expr);
  if (reads !== undefined) return reads;
  reads = [];
  try {
    walk(jsonata(expr).ast(), false, reads);
  } catch {
    // unparseable: validation refuses it before any version is published
  }
  if (cache.size >= MAX_CACHED) cache.clear();
  cache.set(expr, reads);
  return reads;
}

function walk(node: unknown, probe: boolean, out: StepRead[]): void {
  if (Array.isArray(node)) {
    for (const n of node) walk(n, probe, out);
    return;
  }
  if (node === null || typeof node !== 'object') return;
  const n = node as Record<string, unknown>;
  if (n['type'] === 'path' && Array.isArray(n['steps'])) {
    const [head, name] = n['steps'] as { type?: string; value?: unknown }[];
    if (head?.type === 'name' && head.value === 'steps' && name?.type === 'name' && typeof name.value === 'string') {
      out.push({ step: name.value, probe });
    }
  }
  const isProbe = n['type'] === 'function' && (n['procedure'] as { value?: unknown } | undefined)?.value === 'exists';
  for (const [key, v] of Object.entries(n)) walk(v, key === 'arguments' ? isProbe : false, out);
}
