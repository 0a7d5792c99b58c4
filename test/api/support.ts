import { SignJWT } from 'jose';
import { type Api, buildApi } from '../../engine/api/server.ts';
import type { Engine } from '../../engine/runtime/engine.ts';
import type { LogicVersion } from '../../contracts/index.ts';
import { makeLogic } from '../contracts/helpers.ts';

export const AUTH_SECRET = 'test-secret-for-hs256-tokens-0123456789abcdef';

export interface TokenClaims {
  sub?: string;
  envs?: string[];
  scope?: string;
  /** Seconds from now; negative for an expired token. (Default: 600) */
  expiresIn?: number;
  secret?: string;
}

/** An HS256 token as `s8flow token` mints it. */
export async function token(c: TokenClaims = {}): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({ envs: c.envs ?? ['test-env'], scope: c.scope ?? 'flow:admin' })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject(c.sub ?? 'alice')
    .setIssuedAt(now - 60)
    .setExpirationTime(now + (c.expiresIn ?? 600))
    .sign(new TextEncoder().encode(c.secret ?? AUTH_SECRET));
}

export async function bearer(c: TokenClaims = {}): Promise<{ authorization: string }> {
  return { authorization: `Bearer ${await token(c)}` };
}

/** The API in front of `engine`, for app.inject(): no port is opened. */
export function testApi(engine: Engine, opts: { bodyLimit?: number } = {}): Promise<Api> {
  return buildApi({ engine, auth: { secret: AUTH_SECRET, production: false }, ...opts });
}

/** A definition that parks twice: on a 202 from handler `svc`, then on a decision. */
export function parkedLogic(logicId: string, extra: Partial<LogicVersion> = {}): LogicVersion {
  return makeLogic({
    logicId,
    start: 'ask',
    steps: {
      ask: { kind: 'proxy', handler: 'svc', path: '/later', next: 'approve' },
      approve: { kind: 'decision', options: ['yes', 'no'], next: 'done' },
      done: { kind: 'pass' },
    },
    ...extra,
  });
}
