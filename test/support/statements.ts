import type pg from 'pg';
import type { Db } from '../../engine/store/db.ts';

/** Where a client checked out during statementsSent() records what it is sent. */
const RECORD = Symbol('statements sent');
type Recorded = pg.PoolClient & { [RECORD]?: string[] | null };

/**
 * Runs `fn` and answers it with every statement it sent through `db`'s pool, in order: `pool: <text>`
 * for a statement sent on the pool (a transaction of its own), `client` for each client checked
 * out, by a transaction, a batcher or `pool.query` itself (which checks one out through
 * `connect(callback)`: the callback is passed through), and `client: <text>` for a statement sent
 * on a client checked out with `connect()` (a transaction's, a batch's).
 */
export async function statementsSent<T>(db: Db, fn: () => Promise<T>): Promise<{ result: T; sent: string[] }> {
  const sent: string[] = [];
  const held = new Set<Recorded>();
  const query = db.pool.query.bind(db.pool) as (...args: unknown[]) => Promise<unknown>;
  const connect = db.pool.connect.bind(db.pool);
  db.pool.query = ((config: unknown, ...rest: unknown[]) => {
    sent.push(`pool: ${typeof config === 'string' ? config : (config as { text: string }).text}`);
    return query(config, ...rest);
  }) as typeof db.pool.query;
  db.pool.connect = ((...args: unknown[]) => {
    sent.push('client');
    const out = (connect as (...a: unknown[]) => unknown)(...args);
    if (args.length > 0) return out; // pool.query's own checkout: its statement is counted above
    return (out as Promise<Recorded>).then((client) => {
      if (!(RECORD in client)) {
        const clientQuery = client.query.bind(client) as (...a: unknown[]) => unknown;
        client.query = ((config: unknown, ...rest: unknown[]) => {
          client[RECORD]?.push(`client: ${typeof config === 'string' ? config : (config as { text: string }).text}`);
          return clientQuery(config, ...rest);
        }) as typeof client.query;
      }
      client[RECORD] = sent;
      held.add(client);
      return client;
    });
  }) as typeof db.pool.connect;
  try {
    return { result: await fn(), sent };
  } finally {
    db.pool.query = query as typeof db.pool.query;
    db.pool.connect = connect as typeof db.pool.connect;
    for (const client of held) client[RECORD] = null;
  }
}
