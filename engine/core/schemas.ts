import { z } from 'zod';
import type { StepOutcome } from '../../contracts/index.ts';

const cache = new Map<string, z.ZodType>();

/** Compiles a JSON Schema once (by its text) into a validator. */
export function validatorFor(schema: Record<string, unknown>): z.ZodType {
  const key = JSON.stringify(schema);
  let v = cache.get(key);
  if (v === undefined) {
    v = z.fromJSONSchema(schema as Parameters<typeof z.fromJSONSchema>[0]);
    cache.set(key, v);
  }
  return v;
}

/** Problems of `value` against `schema`, as `path: message` lines; empty when it conforms. */
export function schemaProblems(schema: Record<string, unknown>, value: unknown): string[] {
  const r = validatorFor(schema).safeParse(value);
  return r.success ? [] : r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`);
}

/** A step output that breaks the step's declared output schema is a permanent failure. */
export function validateOutput(schema: Record<string, unknown> | undefined, output: unknown, step: string): StepOutcome {
  if (schema === undefined) return { status: 'succeeded', output };
  const problems = schemaProblems(schema, output);
  if (problems.length === 0) return { status: 'succeeded', output };
  return {
    status: 'failed',
    retryable: false,
    error: { code: 'FLOW_STEP_OUTPUT_INVALID', message: `step ${step} returned output that breaks its schema: ${problems.join('; ')}` },
  };
}
