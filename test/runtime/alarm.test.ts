import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Alarm } from '../../engine/runtime/alarm.ts';

/**
 * The wake-up of every loop (claims, timers, drain, outbox relay). Time is faked and never
 * advanced: whatever resolves here was woken by a ring, not by its timeout.
 */
describe('Alarm', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  /** Which of the sleeps have returned, once pending callbacks have run. */
  async function woken(sleeps: Promise<void>[]): Promise<boolean[]> {
    const done = sleeps.map(() => false);
    sleeps.forEach((s, i) => void s.then(() => (done[i] = true)));
    await vi.advanceTimersByTimeAsync(0);
    return done;
  }

  it('wakes every sleeper with one ring', async () => {
    const alarm = new Alarm();
    const a = alarm.waiter();
    const b = alarm.waiter();
    const sleeps = [a.sleep(60_000), b.sleep(60_000)];
    expect(await woken(sleeps)).toEqual([false, false]);
    alarm.ring();
    expect(await woken(sleeps)).toEqual([true, true]);
  });

  it('keeps a ring that came while a loop was busy, for that loop, even while another sleeps', async () => {
    const alarm = new Alarm();
    const busy = alarm.waiter();
    const sleeper = alarm.waiter();
    const other = sleeper.sleep(60_000);
    alarm.ring(); // `busy` is looking for work; the ring may have come too late for its look
    expect(await woken([other, busy.sleep(60_000)])).toEqual([true, true]);
  });

  it('keeps a ring with no sleeper for the next sleep, once', async () => {
    const alarm = new Alarm();
    const loop = alarm.waiter();
    alarm.ring();
    alarm.ring();
    expect(await woken([loop.sleep(60_000)])).toEqual([true]);
    expect(await woken([loop.sleep(60_000)])).toEqual([false]);
  });

  it('sleeps its time out when nothing rings', async () => {
    const alarm = new Alarm();
    const s = alarm.waiter().sleep(100);
    expect(await woken([s])).toEqual([false]);
    await vi.advanceTimersByTimeAsync(100);
    await expect(s).resolves.toBeUndefined();
  });

  it('a waiter made after a ring does not see it', async () => {
    const alarm = new Alarm();
    alarm.ring();
    const late = alarm.waiter();
    expect(await woken([late.sleep(60_000)])).toEqual([false]);
    alarm.ring();
    await vi.advanceTimersByTimeAsync(0);
  });
});
