import { z } from 'zod';
import type { JsonSchemaDoc } from './draft.ts';
import { FlowSdkError, SdkErrorCode } from './errors.ts';

/**
 * zod → JSON Schema (draft 2020-12), describing the JSON a schema accepts (`io: "input"`): that is
 * what the engine validates and stores. Deterministic for a given schema; the compiler canonicalises
 * key order.
 */
export function toJsonSchema(schema: z.core.$ZodType, where: string, opts: { array?: boolean } = {}): JsonSchemaDoc {
  try {
    return z.toJSONSchema(opts.array === true ? z.array(schema) : schema, { target: 'draft-2020-12', io: 'input', unrepresentable: 'throw' }) as JsonSchemaDoc;
  } catch (err) {
    throw new FlowSdkError(
      SdkErrorCode.schemaUnrepresentable,
      `${where}: the zod schema has no JSON Schema form (${(err as Error).message}); ` +
        'use plain JSON types (no transforms, dates, maps or functions)',
    );
  }
}
