import http from 'node:http';
import https from 'node:https';
import { expect, vi } from 'vitest';
import type { Instance } from '../../engine/core/instance.ts';
import type { Fake } from '../../engine/testing/index.ts';
import type { FuncRuntime } from '../../host-functions/index.ts';

/**
 * Everything a replay could call out through: the fakes and the module runtime of the live run it
 * replays, and the network (node:http, node:https and fetch, which the engine's executors use).
 * Outside `during()` they pass calls through, so the live run uses the very same objects; inside,
 * every call is recorded and refused.
 */
export class World {
  readonly fakes: Record<string, Fake>;
  readonly funcRuntime: FuncRuntime | undefined;
  #armed: string[] | null = null;

  constructor(fakes: Record<string, Fake>, funcRuntime?: FuncRuntime) {
    this.fakes = Object.fromEntries(
      Object.entries(fakes).map(([key, fake]): [string, Fake] => [
        key,
        (call) => {
          this.#trip(`fake ${key} (${call.kind} ${call.step})`);
          return fake(call);
        },
      ]),
    );
    this.funcRuntime =
      funcRuntime === undefined
        ? undefined
        : {
            run: (req) => {
              this.#trip(`module run ${req.moduleHash.slice(0, 12)}`);
              return funcRuntime.run(req);
            },
            close: () => funcRuntime.close(),
          };
  }

  #trip(what: string): void {
    if (this.#armed === null) return;
    this.#armed.push(what);
    throw new Error(`tripwire: called ${what} during a replay`);
  }

  /** Runs `fn` with every channel armed, and returns what it called (a refused call may also make it throw). */
  async during(fn: () => Promise<unknown>): Promise<string[]> {
    const calls: string[] = [];
    this.#armed = calls;
    const refuse = (what: string) => () => {
      calls.push(what);
      throw new Error(`tripwire: called ${what} during a replay`);
    };
    const spies = [
      vi.spyOn(http, 'request').mockImplementation(refuse('node:http request')),
      vi.spyOn(https, 'request').mockImplementation(refuse('node:https request')),
      vi.spyOn(globalThis, 'fetch').mockImplementation(refuse('fetch')),
    ];
    try {
      await fn();
    } catch (err) {
      // a refused call may surface as the replay's own error; anything else must still be seen
      if (calls.length === 0) throw err;
    } finally {
      this.#armed = null;
      for (const s of spies) s.mockRestore();
    }
    return calls;
  }
}

/** A replay under test: the real one, or a deliberately broken variant that proves the check can fail. */
export type Replayer<L, T> = (logic: L, trace: T, world: World) => Promise<Instance>;

/** The assertion every replay test makes: no call left the replay. */
export function expectZeroCalls(calls: readonly string[]): void {
  expect(calls, 'calls made during the replay').toEqual([]);
}
