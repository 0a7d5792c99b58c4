import type { Client } from './tx.ts';

/**
 * Stores module binaries in the caller's env, keyed by their sha256 (already checked by the
 * caller). A hash stored before keeps its row: the same hash is the same bytes.
 */
export async function putModules(c: Client, env: string, modules: ReadonlyMap<string, Uint8Array>): Promise<void> {
  for (const [sha256, bytes] of modules) {
    await c.query(
      `INSERT INTO modules (env_id, sha256, bytes, size) VALUES ($1, $2, $3, $4) ON CONFLICT (env_id, sha256) DO NOTHING`,
      [env, sha256, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength), bytes.byteLength],
    );
  }
}
