import type { Db } from '../../engine/store/db.ts';

/**
 * Runs `fn` and answers it with every statement it sent through `db`'s pool, in order: `pool: <text>`
 * for a statement sent on the pool (a transaction of its own), and `client` for each client
 * checked out, by a transaction or by `pool.query` itself (which checks one out through
 * `connect(callback)`: the callback is passed through).
 */
export async function statementsSent<T>(db: Db, fn: () => Promise<T>): Promise<{ result: T; sent: string[] }> {
  const sent: string[] = [];
  const query = db.pool.query.bind(db.pool) as (...args: unknown[]) => Promise<unknown>;
  const connect = db.pool.connect.bind(db.pool);
  db.pool.query = ((config: unknown, ...rest: unknown[]) => {
    sent.push(`pool: ${typeof config === 'string' ? config : (config as { text: string }).text}`);
    return query(config, ...rest);
  }) as typeof db.pool.query;
  db.pool.connect = ((...args: unknown[]) => {
    sent.push('client');
    return (connect as (...a: unknown[]) => unknown)(...args);
  }) as typeof db.pool.connect;
  try {
    return { result: await fn(), sent };
  } finally {
    db.pool.query = query as typeof db.pool.query;
    db.pool.connect = connect as typeof db.pool.connect;
  }
}
