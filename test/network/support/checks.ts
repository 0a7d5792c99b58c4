import { readFileSync } from 'node:fs';
import type { Db } from '../../../engine/store/db.ts';
import type { Delivery } from '../../support/idempotency-ledger.ts';
import { attemptViolations, succeededKeys } from '../../support/store-checks.ts';

/** Every delivery the service process logged, in arrival order. */
export function readDeliveries(file: string): Delivery[] {
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return [];
  }
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Delivery);
}

/**
 * Breaches, over everything the service saw and everything the database holds, of:
 * - no effect applied twice under one key (the service's ledger), and no call for a key whose
 *   success was committed when it arrived (a committed step run again);
 * - no committed transition lost: every effect the service applied is committed as succeeded, and
 *   every success committed was applied; attempts are consistent (store-checks.ts).
 */
export async function effectViolations(db: Db, deliveries: Delivery[]): Promise<string[]> {
  const out: string[] = [];
  const applied = new Map<string, number>();
  for (const d of deliveries) if (d.outcome === 'applied') applied.set(d.key, (applied.get(d.key) ?? 0) + 1);
  for (const [key, n] of applied) if (n > 1) out.push(`effect applied ${n} times under ${key}`);
  for (const d of deliveries) if (d.afterCommit) out.push(`call ${d.op} under ${d.key} (attempt ${d.attempt}, from ${d.via}) arrived after its success was committed`);
  const committed = new Set(await succeededKeys(db));
  for (const key of applied.keys()) if (!committed.has(key)) out.push(`effect applied under ${key} but no success committed (a lost transition)`);
  for (const key of committed) if (!applied.has(key)) out.push(`success committed under ${key} that the service never applied`);
  out.push(...(await attemptViolations(db)));
  return out;
}

/**
 * Samples the instances while faults come and go: a lease that ran out `graceMs` ago on an instance
 * that still runs means its holder is dead (or cut off) and nobody took it over.
 */
export class LeaseWatch {
  /** The longest each lease was seen expired, by instance and token. */
  readonly #seen = new Map<string, number>();
  #timer: NodeJS.Timeout;
  #busy = false;

  constructor(
    private readonly db: Db,
    graceMs: number,
  ) {
    this.#timer = setInterval(() => {
      if (this.#busy) return;
      this.#busy = true;
      this.db.pool
        .query<{ id: string; token: string; ms: number }>(
          `SELECT id, lease_token AS token, (extract(epoch FROM now() - lease_expires_at) * 1000)::int AS ms FROM workflows
            WHERE state IN ('processing', 'compensating') AND lease_token IS NOT NULL
              AND lease_expires_at < now() - make_interval(secs => $1::float8 / 1000)`,
          [graceMs],
        )
        .then(
          (res) => {
            for (const r of res.rows) this.#seen.set(`instance ${r.id} still leased to ${r.token}`, r.ms);
          },
          () => {},
        )
        .finally(() => (this.#busy = false));
    }, 250);
  }

  stop(): string[] {
    clearInterval(this.#timer);
    return [...this.#seen].map(([what, ms]) => `${what}, seen expired ${ms} ms`);
  }
}
