import type pg from 'pg';
import type { Db } from './db.ts';
import { BadEnvName } from './errors.ts';

export type Client = pg.PoolClient;
/** Where a statement that scopes itself can run: the pool (its own transaction) or a client. */
export type Queryable = pg.Pool | pg.PoolClient;

/**
 * Runs `fn` in a transaction scoped to one environment: `app.env_id` is set and the role is
 * switched to `flow_app` for this transaction only, so row-level security applies even when the
 * connecting user owns the tables (FORCE) — and a superuser connection is demoted too.
 */
export function inEnv<T>(db: Db, env: string, fn: (c: Client) => Promise<T>, o: TxOptions = {}): Promise<T> {
  if (!isEnvName(env)) return Promise.reject(new BadEnvName(env));
  return inTx(db, (c) => `SELECT set_config('app.env_id', ${c.escapeLiteral(env)}, true), set_config('role', 'flow_app', true)`, fn, o);
}

export interface TxOptions {
  /**
   * One snapshot for every statement (REPEATABLE READ), read-only: for a read made of several
   * statements that must agree, as a dry run's groups and the instances it plans from them.
   * (Default: false, READ COMMITTED)
   */
  snapshot?: boolean;
}

/**
 * Any Unicode name of 1–64 characters (the contract's bound) is an environment, quotes and all:
 * it is data, passed as a literal. Control characters are not: a NUL cannot cross the Postgres
 * protocol, and a lone surrogate is not text. Checked here, the one door to every env's rows.
 */
export function isEnvName(env: string): boolean {
  return (
    typeof env === 'string' &&
    env.length >= 1 &&
    [...env].length <= 64 &&
    ![...env].some((ch) => ch.charCodeAt(0) < 0x20 || ch.charCodeAt(0) === 0x7f) &&
    !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(env)
  );
}

/** A transaction for the scheduler's cross-environment work (claiming, timers, relay). */
export function asScheduler<T>(db: Db, fn: (c: Client) => Promise<T>): Promise<T> {
  return inTx(db, () => "SELECT set_config('role', 'flow_engine', true)", fn);
}

async function inTx<T>(db: Db, setup: (c: Client) => string, fn: (c: Client) => Promise<T>, o: TxOptions = {}): Promise<T> {
  const client = await db.pool.connect();
  let broken = false;
  try {
    // one round trip: a simple query may carry several statements (no parameters, so the env is
    // quoted as a literal)
    await client.query(`BEGIN${o.snapshot ? ' ISOLATION LEVEL REPEATABLE READ READ ONLY' : ''}; ${setup(client)}`);
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {
      broken = true;
    });
    throw err;
  } finally {
    // A client whose connection failed mid-transaction must not go back to the pool.
    client.release(broken);
  }
}
