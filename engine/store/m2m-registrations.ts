import type { Db } from './db.ts';
import { asScheduler } from './tx.ts';

/**
 * The registrations of every node in one table (migration 0026). A transaction-scoped advisory
 * lock on the identity serialises the nodes that find no row: the first registers while holding
 * it, the others wait and then read what it wrote, so an identity is registered once.
 * (The shape is engine/executors' RegistrationStore: the store does not import the executors.)
 */
export function pgRegistrations(db: Db): { keep(identity: string, fingerprint: string, register: () => Promise<Buffer>): Promise<Buffer> } {
  return {
    keep: (identity, fingerprint, register) =>
      asScheduler(db, async (c) => {
        await c.query(`SELECT pg_advisory_xact_lock(hashtextextended('m2m_registration:' || $1, 0))`, [identity]);
        const row = await c.query<{ fingerprint: string; sealed: Buffer }>('SELECT fingerprint, sealed FROM m2m_registrations WHERE identity = $1', [identity]);
        if (row.rows[0]?.fingerprint === fingerprint) return row.rows[0].sealed;
        const sealed = await register();
        await c.query(
          `INSERT INTO m2m_registrations (identity, fingerprint, sealed) VALUES ($1, $2, $3)
           ON CONFLICT (identity) DO UPDATE SET fingerprint = excluded.fingerprint, sealed = excluded.sealed, registered_at = now()`,
          [identity, fingerprint, sealed],
        );
        return sealed;
      }),
  };
}
