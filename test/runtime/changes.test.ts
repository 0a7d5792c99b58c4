import { randomUUID } from 'node:crypto';
import { expect, it } from 'vitest';
import { Changes } from '../../engine/runtime/changes.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';

const logic = makeLogic({ logicId: 'changes.watch', start: 's0', steps: { s0: { kind: 'proxy', path: '/a' } } });

// Migration 0013: a NOTIFY on every write of a workflow row cost every step two commits (each
// LISTEN connection reads the queue in a transaction) and its share of a WAL flush. Rows are
// notified only while some process watches.
describeEachDriver('flow_changes is notified only while a page watches', (getDb) => {
  /**
   * Payloads heard on flow_changes, in commit order; `settled()` waits for what was sent so far.
   * NOTIFY is database-wide: files running beside this one (other schemas, same database) are
   * heard too, so only the payloads naming `ids` count.
   */
  async function hear(ids: string[]) {
    const heard: string[] = [];
    const unlisten = await getDb().listen('flow_changes', (p) => heard.push(p));
    let n = 0;
    return {
      heard,
      unlisten,
      /** Notifications arrive in commit order: once a marker sent now is heard, so is everything before it. */
      async settled(): Promise<string[]> {
        const marker = `marker-${++n}`;
        await getDb().pool.query(`SELECT pg_notify('flow_changes', $1)`, [marker]);
        while (!heard.includes(marker)) await new Promise((r) => setImmediate(r));
        return heard.filter((p) => ids.includes(p));
      },
    };
  }

  /**
   * `changes` listens on a connection of its own, which hears a notification in its own time: once
   * it has heard a marker sent now, it has heard everything sent before (commit order again).
   */
  async function changesSettled(changes: Changes): Promise<void> {
    const marker = `marker-${randomUUID()}`;
    let heard = false;
    const leave = await changes.subscribe(marker, () => {
      heard = true;
    });
    await getDb().pool.query(`SELECT pg_notify('flow_changes', $1)`, [marker]);
    while (!heard) await new Promise((r) => setImmediate(r));
    await leave();
  }

  const touch = (id: string) => asScheduler(getDb(), (c) => c.query('UPDATE workflows SET run_at = now() WHERE id = $1', [id]));

  it('a write nobody watches sends nothing; a watched one reaches its subscriber; after the last leaves, nothing again', async () => {
    const db = getDb();
    const engine = new Engine({ db, env: 'changes-env', executors: { handlers: new Map() } });
    await engine.publish(logic);
    const { id } = await engine.start({ logicId: logic.logicId, input: {} });
    const ear = await hear([id]);
    // what a watched write in another schema of the same database sends: not this test's
    await getDb().pool.query(`SELECT pg_notify('flow_changes', gen_random_uuid()::text)`);
    await touch(id);
    expect(await ear.settled()).toEqual([]);

    const changes = new Changes(db);
    let told = 0;
    const leave = await changes.subscribe(id, () => told++);
    await touch(id);
    expect(await ear.settled()).toEqual([id]);
    await changesSettled(changes);
    expect(told).toBe(1);

    await leave();
    await touch(id);
    expect(await ear.settled()).toEqual([id]);
    await changes.close();
    await ear.unlisten();
  });
});
