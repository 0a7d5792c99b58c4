import type { Client } from './tx.ts';

/** Which of `hashes` are stored in the caller's env (row-level security scopes the lookup). */
export async function storedModules(c: Client, hashes: readonly string[]): Promise<Set<string>> {
  if (hashes.length === 0) return new Set();
  const res = await c.query<{ sha256: string }>('SELECT sha256 FROM modules WHERE sha256 = ANY($1::text[])', [hashes]);
  return new Set(res.rows.map((r) => r.sha256));
}
