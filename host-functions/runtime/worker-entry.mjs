// Entry of a Sentin8:Func worker thread. Plain JavaScript: a Worker does not
// inherit the TypeScript loader of its parent (vitest, tsx), so Node must be
// able to load this file and everything it imports on its own.
//
// Between runs the thread sleeps in Atomics.wait on its control block, not in
// its event loop: the parent posts a run on `port` and bumps control[TASK];
// the run is taken off the port with receiveMessageOnPort, and the reply is
// posted back on the same port before control[DONE] is bumped, so a parent
// waiting on control[DONE] can take it at once (worker-pool.ts).
import { receiveMessageOnPort, workerData } from 'node:worker_threads';
import createPlugin from '@extism/extism';
import { instantiate, runModule } from './run-module.mjs';

/** @type {{ control: Int32Array, port: import('node:worker_threads').MessagePort }} */
const { control, port } = workerData;
const TASK = 0;
const DONE = 1;

// The first createPlugin in a process costs ~20 ms (Node loads undici lazily);
// pay it before reporting ready, so it never counts against a run's timeout.
const empty = new WebAssembly.Module(new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]));
await (await createPlugin({ wasm: [{ module: empty }] }, { useWasi: false })).close();

/**
 * A fresh instance of the module this worker ran last, made while it waits for the next run:
 * instantiating is most of a run's cost, and a module tends to run again and again.
 * @type {{ moduleHash: string, instance: import('./run-module.mjs').Instance | null } | null}
 */
let spare = null;

/** @param {import('./protocol.ts').RunTask} task */
async function serve(task) {
  const log = (/** @type {string} */ level, /** @type {string} */ message) =>
    port.postMessage({ type: 'log', id: task.id, level, message });
  const taken = spare;
  spare = null;
  const ready = taken?.moduleHash === task.moduleHash ? taken.instance : null;
  if (ready === null) await taken?.instance?.plugin.close();
  let outcome;
  try {
    outcome = await runModule(task, log, ready);
  } catch (err) {
    outcome = { kind: 'failed', code: 'FUNC_WORKER_CRASHED', message: err instanceof Error ? err.message : String(err) };
  }
  done({ type: 'result', id: task.id, outcome });
  spare = { moduleHash: task.moduleHash, instance: await instantiate(task.module, task.declaredImports).catch(() => null) };
}

/** @param {import('./protocol.ts').WorkerMessage} message */
function done(message) {
  port.postMessage(message);
  Atomics.add(control, DONE, 1);
  Atomics.notify(control, DONE);
}

let seen = Atomics.load(control, TASK);
/** Sleeps until the parent bumps control[TASK], serves what it posted, and comes back through the event loop. */
async function next() {
  Atomics.wait(control, TASK, seen);
  seen = Atomics.load(control, TASK);
  for (let m = receiveMessageOnPort(port); m !== undefined; m = receiveMessageOnPort(port)) await serve(m.message);
  setImmediate(next);
}

done({ type: 'ready' });
setImmediate(next);
