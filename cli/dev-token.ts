import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SignJWT } from 'jose';

/**
 * The HS256 secret `s8flow dev` verifies tokens with: FLOW_AUTH_SECRET when set, else one made on
 * first run and kept in the state folder, so tokens printed earlier still work after a restart.
 */
export function devAuthSecret(stateDir: string): string {
  const given = process.env['FLOW_AUTH_SECRET'];
  if (given) return given;
  const file = join(stateDir, 'auth-secret');
  if (existsSync(file)) return readFileSync(file, 'utf8').trim();
  const made = randomBytes(32).toString('hex');
  writeFileSync(file, `${made}\n`, { mode: 0o600 });
  return made;
}

/** A development bearer token (claims: ARCHITECTURE.md, Contracts: HTTP API), signed with the HS256 secret. */
export function mintToken(secret: string, claims: { sub: string; envs: string[]; scope: string; ttlSeconds?: number }): Promise<string> {
  return new SignJWT({ envs: claims.envs, scope: claims.scope })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(claims.sub)
    .setIssuedAt()
    .setExpirationTime(`${claims.ttlSeconds ?? 12 * 3600}s`)
    .sign(new TextEncoder().encode(secret));
}
