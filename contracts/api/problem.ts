import { z } from 'zod';

/**
 * Every error the API answers is `application/problem+json` (RFC 9457) with a stable `code` from
 * docs/errors.md (ARCHITECTURE.md, Contracts: HTTP API).
 */
export const Problem = z
  .strictObject({
    type: z.string().describe('A URI naming the kind of problem: `urn:sentin8-flow:error:<code>`'),
    title: z.string().describe('A short, human summary of the kind of problem'),
    status: z.int().min(400).max(599),
    code: z.string().describe('The stable FLOW_… code; match on this, never on text'),
    detail: z.string().describe('What went wrong with this request, and what to do next'),
    instance: z.string().describe('The request path'),
    errors: z
      .array(z.strictObject({ path: z.string(), message: z.string() }))
      .optional()
      .describe('For a request that breaks its schema: each problem and where'),
  })
  .meta({ id: 'Problem' });
export type Problem = z.infer<typeof Problem>;

export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

/** The URI in `type` for a code. */
export const problemType = (code: string) => `urn:sentin8-flow:error:${code}`;
