import { describe, expect, it } from 'vitest';
import { Slots } from '../../engine/runtime/slots.ts';

/** A run that holds its slot until released. */
function held(slots: Slots, key: string, log: string[], name: string) {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const done = slots.run(key, async () => {
    log.push(name);
    await gate;
  });
  return { release, done };
}

const turn = () => new Promise((r) => setImmediate(r));

describe('executor slots are shared between envs in turn', () => {
  it("an env's backlog delays another env's run by one turn, not by the backlog", async () => {
    const slots = new Slots(1);
    const log: string[] = [];
    const first = held(slots, 'a', log, 'a0');
    const backlog = Array.from({ length: 5 }, (_, i) => held(slots, 'a', log, `a${i + 1}`));
    await turn();
    // env b holds no slot while env a holds the only one: b runs at once, over the bound
    const b = held(slots, 'b', log, 'b0');
    await turn();
    expect(log).toEqual(['a0', 'b0']);
    // b's second run waits its turn with a's backlog: a's next, then b's, then a's rest
    const b2 = held(slots, 'b', log, 'b1');
    first.release();
    b.release();
    await turn();
    backlog[0]!.release();
    await turn();
    expect(log.slice(0, 4)).toEqual(['a0', 'b0', 'a1', 'b1']);
    b2.release();
    for (const r of backlog) r.release();
    await Promise.all([first.done, b.done, b2.done, ...backlog.map((r) => r.done)]);
    expect(log).toEqual(['a0', 'b0', 'a1', 'b1', 'a2', 'a3', 'a4', 'a5']);
  });
});
