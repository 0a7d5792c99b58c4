// Runs one step module once, inside a worker thread. Plain JavaScript so that
// Node loads it without a TypeScript loader; types are in protocol.ts.
import createPlugin from '@extism/extism';
import { jsonEqual } from './json-equal.mjs';

/** @typedef {import('./protocol.ts').RunTask} RunTask */
/** @typedef {import('./protocol.ts').WorkerOutcome} WorkerOutcome */

const utf8 = new TextDecoder('utf-8', { fatal: true });
const encoder = new TextEncoder();
/** The offset part of an Extism address (the top 16 bits name the block). */
const OFFSET_MASK = (1n << 48n) - 1n;
/** One block's span of addresses, and the first address a double cannot hold exactly (block 32). */
const BLOCK_SPAN = 2 ** 48;
const EXACT = 2 ** 53;
/**
 * How the AssemblyScript runtime words a request for more memory than can
 * exist (as reported through the guest library's abort handler). Matching
 * text is the only signal: the allocator has no error code.
 */
const OUT_OF_MEMORY = /^(Allocation too large|Invalid length) \(at ~lib\//;

/** Thrown from a host function to stop the module; carries the outcome of the run. */
class HostStop extends Error {
  /** @param {WorkerOutcome} outcome */
  constructor(outcome) {
    super(outcome.kind);
    this.outcome = outcome;
  }
}

/**
 * A fresh instance of a module, not yet bound to a run: its host functions read the run from
 * `bindings`, filled in when the run begins. Making one costs ~170 µs (most of a run), so a worker
 * makes the next one while it is idle (worker-entry.mjs). An instance whose instantiation touched
 * the host at all (the module's start function called an import, logged, or trapped) is `tainted`:
 * it could have seen no run's clock or records, so it is never used and the run instantiates anew.
 * When the module exports its state (`exposed`, see expose-state.ts), an instance made ahead keeps
 * a `snapshot` of it, and a run that ends done or suspended puts it back: the same instance then
 * serves the next run as if new, and its first call's warm-up is paid once.
 * @typedef {{ task: RunTask | null, log: (level: string, message: string) => void, state: RunState, tainted: boolean }} Bindings
 * @typedef {{ calls: number, allocated: number, stop: WorkerOutcome | null, input: DataView, blocks: (DataView | null)[] }} RunState
 * @typedef {{ exports: Record<string, unknown>, memories: { memory: WebAssembly.Memory, bytes: Uint8Array }[], globals: { global: WebAssembly.Global, value: unknown }[] }} Snapshot
 * @typedef {{ plugin: import('@extism/extism').Plugin, bindings: Bindings, snapshot: Snapshot | null }} Instance
 * @param {WebAssembly.Module} module
 * @param {readonly string[]} importNames
 * @param {RunTask['state']} [exposed] where the module exports its state; only for an instance made ahead of a run
 *   (a snapshot of one bound to a run would carry what its start function saw of that run)
 * @param {Partial<Pick<Bindings, 'task' | 'log' | 'state'>>} [bindTo] a run to bind at once (instantiation then belongs to it)
 * @returns {Promise<Instance>}
 */
export async function instantiate(module, importNames, exposed = null, bindTo = {}) {
  /** @type {Bindings} */
  const bindings = { task: bindTo.task ?? null, log: bindTo.log ?? (() => {}), state: bindTo.state ?? freshState(), tainted: false };
  /** The run this call belongs to; none yet marks the instance tainted and stops its start function. */
  const current = () => {
    if (bindings.task === null) {
      bindings.tainted = true;
      throw new Error('host function called while instantiating ahead of a run');
    }
    return bindings.task;
  };
  /** @param {WorkerOutcome} outcome */
  const stop = (outcome) => {
    bindings.state.stop ??= outcome;
    throw new HostStop(bindings.state.stop);
  };
  const fail = (/** @type {string} */ code, /** @type {string} */ message) => stop({ kind: 'failed', code, message });

  /** @type {Record<string, (ctx: any, addr: bigint) => bigint>} */
  const user = {};
  for (const importName of importNames) {
    user[importName] = (ctx, addr) => {
      const task = current();
      const state = bindings.state;
      if (state.stop) throw new HostStop(state.stop);
      const n = state.calls++;
      const request = readJson(ctx, addr);
      if (request === undefined) {
        fail('FUNC_BAD_HOST_REQUEST', `host call ${n} (${importName}): the request is not UTF-8 JSON`);
      }
      const recorded = task.recorded[n];
      if (recorded === undefined) return stop({ kind: 'suspended', call: { n, importName, request } });
      if (recorded.importName !== importName || !jsonEqual(recorded.request, request)) {
        fail('FUNC_REPLAY_DIVERGED', divergence(n, recorded, importName, request));
      }
      return ctx.store(JSON.stringify(recorded.response ?? null));
    };
  }

  const functions = {
    'extism:host/user': user,
    'extism:host/env': {
      /** Extism 1.0.3 keeps these blocks in host memory, outside the module's own cap. */
      alloc: (/** @type {any} */ ctx, /** @type {bigint} */ size) => {
        const task = current();
        bindings.state.allocated += Number(size);
        if (bindings.state.allocated > task.maxHostAllocBytes) {
          fail('FUNC_MEMORY', `module allocated more than ${task.maxHostAllocBytes} bytes of Extism host memory in one run`);
        }
        const addr = ctx.alloc(size);
        bindings.state.blocks[Number(addr >> 48n)] = writable(ctx, addr);
        return addr;
      },
      // The PDK moves the input in and the output out 8 bytes per host call. Extism's own
      // versions of these two re-find the block and mask with fresh BigInts on every call;
      // these read the run's input and the blocks the module allocated (above) directly, with
      // the same results (RangeError past the end; a write to an unknown block does nothing).
      // An address below 2^53 (the first 32 blocks) is split in double arithmetic, exactly:
      // BigInt operations allocate: with them these two were a fifth of a 1 KB run's profile.
      input_load_u64: (/** @type {any} */ _ctx, /** @type {bigint} */ offset) => {
        current();
        const at = Number(offset);
        return bindings.state.input.getBigUint64(at < BLOCK_SPAN ? at : Number(offset & OFFSET_MASK), true);
      },
      store_u64: (/** @type {any} */ ctx, /** @type {bigint} */ addr, /** @type {bigint} */ value) => {
        const at = Number(addr);
        const index = at < EXACT ? Math.floor(at / BLOCK_SPAN) : Number(addr >> 48n);
        const block = bindings.state.blocks[index] ?? writable(ctx, addr);
        block?.setBigUint64(at < EXACT ? at - index * BLOCK_SPAN : Number(addr & OFFSET_MASK), value, true);
      },
      error_set: (/** @type {any} */ ctx, /** @type {bigint} */ addr) => {
        current();
        const message = ctx.read(addr)?.text() ?? 'module reported an error';
        fail(OUT_OF_MEMORY.test(message) ? 'FUNC_MEMORY' : 'FUNC_TRAP', message);
      },
      http_request: () => {
        current();
        fail('FUNC_TRAP', 'Extism http_request is disabled; reach services through a declared host function');
      },
    },
    env: {
      'Date.now': () => current().clock.nowMs,
      seed: () => current().clock.seed,
    },
  };
  /** @param {string} level */
  const logAt = (level) => (/** @type {string} */ m) => {
    if (bindings.task === null) bindings.tainted = true;
    else bindings.log(level, m);
  };
  const logger = { debug: logAt('debug'), info: logAt('info'), warn: logAt('warn'), error: logAt('error') };
  const plugin = await createPlugin(
    { wasm: [{ module }] },
    { useWasi: false, functions, logger: /** @type {Console} */ (/** @type {unknown} */ (logger)) },
  );
  return { plugin, bindings, snapshot: exposed && !bindings.tainted ? await snapshotOf(plugin, exposed) : null };
}

/** @param {import('@extism/extism').Plugin} plugin @param {NonNullable<RunTask['state']>} exposed @returns {Promise<Snapshot>} */
async function snapshotOf(plugin, exposed) {
  const { exports } = await plugin.getInstance('0');
  return {
    exports,
    memories: exposed.memories.map((name) => {
      const memory = /** @type {WebAssembly.Memory} */ (exports[name]);
      return { memory, bytes: new Uint8Array(memory.buffer).slice() };
    }),
    globals: exposed.globals.map((name) => {
      const global = /** @type {WebAssembly.Global} */ (exports[name]);
      return { global, value: global.value };
    }),
  };
}

/**
 * Puts memories and globals back as they were when the instance was made. False when it cannot:
 * a memory grew, and a bigger memory is not as good as new (the module can see its size).
 * @param {Snapshot} snapshot
 */
function restore(snapshot) {
  if (snapshot.memories.some((m) => m.memory.buffer.byteLength !== m.bytes.byteLength)) return false;
  for (const m of snapshot.memories) new Uint8Array(m.memory.buffer).set(m.bytes);
  for (const g of snapshot.globals) g.global.value = g.value;
  return true;
}

/**
 * Runs the export once on a fresh instance: `ready` when one was made ahead for this module and is
 * untainted, otherwise a new one (whose instantiation, running the module's start function, may
 * already trap or call the host). Host calls answer from `task.recorded` synchronously; the first
 * unrecorded one throws HostStop, which Extism propagates out of `plugin.call` unchanged on this
 * thread. No state survives into another run: the instance is closed afterwards, or, when it has a
 * snapshot and the run ended done or suspended, restored and handed back as `reusable`.
 * @param {RunTask} task
 * @param {(level: string, message: string) => void} log
 * @param {Instance | null} [ready]
 * @returns {Promise<{ outcome: WorkerOutcome, reusable: Instance | null }>}
 */
export async function runModule(task, log, ready = null) {
  // Extism stores a Uint8Array's whole buffer as the input block, so it must hold exactly the input.
  const encoded = encoder.encode(task.inputJson);
  const input = encoded.byteLength === encoded.buffer.byteLength ? encoded : encoded.slice();
  const state = freshState(new DataView(input.buffer, input.byteOffset, input.byteLength));
  /** @type {Instance | null} */
  let instance = null;
  /** @type {WorkerOutcome} */
  let outcome;
  try {
    if (ready !== null && !ready.bindings.tainted) {
      instance = ready;
      Object.assign(ready.bindings, { task, log, state });
    } else {
      await ready?.plugin.close();
      instance = await instantiate(task.module, task.declaredImports, null, { task, log, state });
    }
    // ['0', name] names the module; a bare name makes Extism list the module's exports on every call
    const output = await instance.plugin.call(['0', task.exportName], input);
    if (state.stop) outcome = state.stop; // the module caught our exception and carried on
    else if (state.calls < task.recorded.length) {
      outcome = failed('FUNC_REPLAY_DIVERGED', `module finished after ${state.calls} host calls, but ${task.recorded.length} are recorded`);
    } else outcome = parseOutput(output, state.calls);
  } catch (err) {
    outcome = state.stop ?? fromThrown(err);
  }
  if (instance === null) return { outcome, reusable: null };
  await instance.plugin.reset();
  const clean = outcome.kind === 'done' || outcome.kind === 'suspended';
  if (clean && instance.snapshot !== null && restore(instance.snapshot)) {
    Object.assign(instance.bindings, { task: null, log: () => {}, state: freshState() });
    return { outcome, reusable: instance };
  }
  await instance.plugin.close();
  return { outcome, reusable: null };
}

/** @param {DataView} [input] the run's input bytes, as handed to the module @returns {RunState} */
function freshState(input = new DataView(new ArrayBuffer(0))) {
  return { calls: 0, allocated: 0, stop: null, input, blocks: [] };
}

/**
 * A view to write an Extism block through (`ctx.read` gives a read-only one), or null for no block.
 * @param {any} ctx @param {bigint} addr @returns {DataView | null}
 */
function writable(ctx, addr) {
  const block = ctx.read(addr);
  return block === null ? null : new DataView(block.buffer);
}

/** @param {any} ctx @param {bigint} addr */
function readJson(ctx, addr) {
  const block = ctx.read(addr);
  if (block === null) return undefined;
  try {
    return JSON.parse(utf8.decode(block.bytes()));
  } catch {
    return undefined;
  }
}

/** @param {import('@extism/extism').PluginOutput | null} output @param {number} calls @returns {WorkerOutcome} */
function parseOutput(output, calls) {
  if (output === null || output.byteLength === 0) {
    return failed('FUNC_BAD_OUTPUT', 'module set no output; end the export with writeOutput(json)');
  }
  try {
    return { kind: 'done', output: JSON.parse(utf8.decode(output.bytes())), calls };
  } catch (err) {
    return failed('FUNC_BAD_OUTPUT', `module output is not UTF-8 JSON (${errorMessage(err)}); write it with writeOutput(json)`);
  }
}

/** @param {unknown} err @returns {WorkerOutcome} */
function fromThrown(err) {
  const message = errorMessage(err);
  if (err instanceof WebAssembly.RuntimeError) {
    const frame = /wasm-function\[(\d+)\]/.exec(err.stack ?? '');
    return { kind: 'trap', message, funcIndex: frame ? Number(frame[1]) : null };
  }
  if (err instanceof RangeError && /call stack/i.test(message)) return failed('FUNC_TRAP', `stack overflow: ${message}`);
  if (err instanceof RangeError) return failed('FUNC_MEMORY', `host memory for the module ran out: ${message}`);
  return failed('FUNC_TRAP', message);
}

/** @param {number} n @param {{importName: string, request: unknown}} recorded @param {string} importName @param {unknown} request */
function divergence(n, recorded, importName, request) {
  const show = (/** @type {unknown} */ v) => JSON.stringify(v).slice(0, 200);
  return `host call ${n} is ${importName}(${show(request)}) but the record has ${recorded.importName}(${show(recorded.request)}); the module is not deterministic or changed under the same hash`;
}

/** @param {string} code @param {string} message @returns {WorkerOutcome} */
function failed(code, message) {
  return { kind: 'failed', code, message };
}

/** @param {unknown} err */
function errorMessage(err) {
  return err instanceof Error ? err.message : String(err);
}
