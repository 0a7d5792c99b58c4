import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { WorkflowRecordSchema } from '../../contracts/api/workflows.ts';
import type { WorkflowRecord } from '../../contracts/index.ts';
import { ATTRIBUTE_NAME_PATTERN } from '../../contracts/logic-version.ts';
import { serializerCompiler } from '../../engine/api/serialize.ts';

/**
 * Answers are written from their response schema by fast-json-stringify: what a caller reads is
 * what zod's encode of the same value wrote, and nothing a handler's object carries beyond its
 * contract.
 */
const compile = (schema: z.ZodType) => serializerCompiler({ schema, method: 'GET', url: '/x', httpStatus: '200' } as never);

const json = fc.jsonValue().map((v) => JSON.parse(JSON.stringify(v)) as unknown);
const error = fc.option(fc.record({ code: fc.string(), message: fc.string(), step: fc.string(), status: fc.integer() }, { requiredKeys: ['code', 'message'] }));
const instant = fc.date({ noInvalidDate: true }).map((d) => d.toISOString());
const attempt = fc.record({
  step: fc.string(),
  kind: fc.constantFrom('step', 'compensation'),
  attempt: fc.integer({ min: 1, max: 1000 }),
  generation: fc.nat(),
  state: fc.constantFrom('running', 'succeeded', 'failed', 'parked', 'superseded'),
  input: json,
  output: json,
  error,
  idempotencyKey: fc.option(fc.string()),
  startedAt: instant,
  finishedAt: fc.option(instant),
});
const record: fc.Arbitrary<WorkflowRecord> = fc.record(
  {
    id: fc.uuid(),
    env: fc.string(),
    domain: fc.string(),
    logicId: fc.string(),
    version: fc.nat(),
    logicHash: fc.string(),
    state: fc.constantFrom('pending', 'processing', 'waiting', 'completed', 'failed', 'dead_lettered'),
    input: json,
    output: json,
    currentStep: fc.option(fc.string()),
    error,
    generation: fc.nat(),
    correlationId: fc.option(fc.string()),
    parentId: fc.option(fc.uuid()),
    branchIndex: fc.option(fc.nat()),
    createdAt: instant,
    updatedAt: instant,
    steps: fc.array(attempt, { maxLength: 4 }),
    compensations: fc.array(
      fc.record({ step: fc.string(), generation: fc.nat(), state: fc.constantFrom('registered', 'running', 'succeeded', 'failed'), attempts: fc.nat(), error }),
      { maxLength: 2 },
    ),
    attributes: fc.dictionary(fc.stringMatching(ATTRIBUTE_NAME_PATTERN), fc.oneof(fc.string(), fc.integer())),
  },
  { requiredKeys: ['id', 'env', 'domain', 'logicId', 'version', 'logicHash', 'state', 'input', 'output', 'currentStep', 'error', 'generation', 'correlationId', 'parentId', 'branchIndex', 'createdAt', 'updatedAt', 'steps', 'compensations'] },
) as fc.Arbitrary<WorkflowRecord>;

describe('answers written from their response schema', () => {
  it('a WorkflowRecord reads back as zod encoded it', () => {
    const serialize = compile(WorkflowRecordSchema);
    fc.assert(
      fc.property(record, (r) => {
        expect(JSON.parse(serialize(r))).toEqual(JSON.parse(JSON.stringify(z.encode(WorkflowRecordSchema, r))));
      }),
      { numRuns: 500 },
    );
  });

  it('a property beyond the contract is left out, at the top and inside a union branch', () => {
    const serialize = compile(WorkflowRecordSchema);
    const [r] = fc.sample(record, { numRuns: 1, seed: 7 });
    const leaky = { ...r, secret: 's3cr3t', error: { code: 'X', message: 'm', stack: 'at s3cr3t' }, steps: [] };
    const out = serialize(leaky);
    expect(out).not.toContain('s3cr3t');
    expect(JSON.parse(out).error).toEqual({ code: 'X', message: 'm' });
  });

  it('a union takes the branch zod takes: a plain object strips a property more, a strict one refuses it', () => {
    const schema = z.object({ v: z.union([z.strictObject({ a: z.string() }), z.object({ a: z.string(), b: z.string() })]), w: z.object({ a: z.string() }).nullable() });
    const value = { v: { a: 'x', b: 'y' }, w: { a: 'x', c: 'z' } };
    expect(JSON.parse(compile(schema)(value))).toEqual(z.encode(schema, value));
    expect(z.encode(schema, value)).toEqual({ v: { a: 'x', b: 'y' }, w: { a: 'x' } });
  });

  it('an answer without a required property is refused, not written short', () => {
    const serialize = compile(WorkflowRecordSchema);
    const [r] = fc.sample(record, { numRuns: 1, seed: 7 });
    const { logicHash: _, ...short } = r!;
    expect(() => serialize(short)).toThrow(/logicHash/);
  });
});
