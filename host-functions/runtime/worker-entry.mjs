// Entry of a Sentin8:Func worker thread. Plain JavaScript: a Worker does not
// inherit the TypeScript loader of its parent (vitest, tsx), so Node must be
// able to load this file and everything it imports on its own.
import { parentPort } from 'node:worker_threads';
import createPlugin from '@extism/extism';
import { instantiate, runModule } from './run-module.mjs';

if (parentPort === null) throw new Error('worker-entry.mjs must run in a worker thread');
const port = parentPort;

// The first createPlugin in a process costs ~20 ms (Node loads undici lazily);
// pay it before reporting ready, so it never counts against a run's timeout.
const empty = new WebAssembly.Module(new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]));
await (await createPlugin({ wasm: [{ module: empty }] }, { useWasi: false })).close();

/**
 * A fresh instance of the module this worker ran last, for the next run: the one that ran, put
 * back as it was made, or a new one made while the worker waits. Instantiating is most of a run's
 * cost, and a module tends to run again and again.
 * @type {{ moduleHash: string, instance: Promise<import('./run-module.mjs').Instance | null> } | null}
 */
let spare = null;

port.on('message', async (/** @type {import('./protocol.ts').RunTask} */ task) => {
  const log = (/** @type {string} */ level, /** @type {string} */ message) =>
    port.postMessage({ type: 'log', id: task.id, level, message });
  const taken = spare;
  spare = null;
  let ready = null;
  if (taken?.moduleHash === task.moduleHash) ready = await taken.instance;
  else void taken?.instance.then((instance) => instance?.plugin.close());
  let ran;
  try {
    ran = await runModule(task, log, ready);
  } catch (err) {
    const outcome = { kind: 'failed', code: 'FUNC_WORKER_CRASHED', message: err instanceof Error ? err.message : String(err) };
    ran = { outcome, reusable: null };
  }
  port.postMessage({ type: 'result', id: task.id, outcome: ran.outcome });
  const next = ran.reusable ?? instantiate(task.module, task.declaredImports, task.state).catch(() => null);
  spare = { moduleHash: task.moduleHash, instance: Promise.resolve(next) };
});
port.postMessage({ type: 'ready' });
