import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { streamInstance } from '../../engine/api/console-live.ts';
import type { Changes } from '../../engine/runtime/changes.ts';
import type { Engine } from '../../engine/runtime/engine.ts';

/**
 * A /live stream lets its subscription go when the client leaves, even when it leaves while the
 * subscription is still being registered (a leaked one was renewed, and read on every change,
 * for ever), and it ends at its token's expiry.
 */

class FakeResponse extends EventEmitter {
  readonly chunks: string[] = [];
  ended = false;
  write(chunk: string): boolean {
    this.chunks.push(chunk);
    return true;
  }
  end(): void {
    this.ended = true;
    this.emit('close');
  }
}

const record = { id: 'wf-1', steps: [] };
const engine = { get: async () => record, ops: { audit: async () => [] } } as unknown as Engine;
const first = { record: record as never, audit: [], logic: null, mmd: null };

/** A Changes whose subscription resolves when the test says so, counting who is subscribed. */
function fakeChanges() {
  let release: () => void = () => {};
  const state = { subscribed: 0, release: () => release() };
  const changes = {
    subscribe: async () => {
      state.subscribed += 1;
      await new Promise<void>((r) => {
        release = r;
      });
      return async () => {
        state.subscribed -= 1;
      };
    },
  } as unknown as Changes;
  return { changes, state };
}

describe('the /live stream', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('a client that leaves while the subscription is registered leaves no subscription behind', async () => {
    const { changes, state } = fakeChanges();
    const out = new FakeResponse();
    const streaming = streamInstance(out as unknown as ServerResponse, engine, changes, 'env', first);
    await new Promise((r) => setImmediate(r));
    expect(state.subscribed).toBe(1);
    out.emit('close');
    state.release();
    await streaming;
    await new Promise((r) => setImmediate(r));
    expect(state.subscribed).toBe(0);
  });

  it('a client that leaves later lets its subscription go', async () => {
    const { changes, state } = fakeChanges();
    const out = new FakeResponse();
    const streaming = streamInstance(out as unknown as ServerResponse, engine, changes, 'env', first);
    await new Promise((r) => setImmediate(r));
    state.release();
    await streaming;
    expect(state.subscribed).toBe(1);
    out.emit('close');
    await new Promise((r) => setImmediate(r));
    expect(state.subscribed).toBe(0);
  });

  it('the stream ends at its token expiry, and lets its subscription go', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] });
    const { changes, state } = fakeChanges();
    const out = new FakeResponse();
    const until = Date.now() + 90_000;
    const streaming = streamInstance(out as unknown as ServerResponse, engine, changes, 'env', first, { until });
    await vi.advanceTimersByTimeAsync(0);
    state.release();
    await streaming;
    await vi.advanceTimersByTimeAsync(89_000);
    expect(out.ended).toBe(false);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(out.ended).toBe(true);
    expect(out.chunks.join('')).toContain('event: expired');
    expect(state.subscribed).toBe(0);
  });
});
