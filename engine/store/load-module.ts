import type { Client } from './tx.ts';

/**
 * The bytes of a module by hash, from whichever env uploaded it: the scheduler runs every env's
 * steps, and content addressing makes the bytes the same wherever they were uploaded (the
 * runtime verifies the hash again before compiling). Null when no env holds it.
 */
export async function loadModule(c: Client, sha256: string): Promise<Uint8Array | null> {
  const res = await c.query<{ bytes: Buffer }>('SELECT bytes FROM modules WHERE sha256 = $1 LIMIT 1', [sha256]);
  const bytes = res.rows[0]?.bytes;
  return bytes === undefined ? null : new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
