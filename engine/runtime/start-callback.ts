import { z } from 'zod';
import { BadRequest } from '../errors.ts';

/**
 * `callback: { url }` on a start request: where terminal-state notifications of the instance are
 * POSTed by the outbox relay. Read here, beside CreateWorkflowRequest (contracts/), until the
 * contract carries it; the rest of the request is parsed by the contract as before.
 */
export const CallbackConfig = z.strictObject({ url: z.url({ protocol: /^https?$/ }).max(2000) });

export function takeCallback(request: unknown): { request: unknown; callbackUrl: string | null } {
  if (request === null || typeof request !== 'object' || Array.isArray(request) || !('callback' in request)) {
    return { request, callbackUrl: null };
  }
  const { callback, ...rest } = request as Record<string, unknown>;
  if (callback === undefined) return { request: rest, callbackUrl: null };
  const parsed = CallbackConfig.safeParse(callback);
  if (!parsed.success) {
    throw new BadRequest('the start request', parsed.error.issues.map((i) => `callback${i.path.map((p) => `.${String(p)}`).join('')}: ${i.message}`));
  }
  return { request: rest, callbackUrl: parsed.data.url };
}
