import { FuncErrorCode, FuncModuleError } from '../errors.ts';
import { checkDeclaredImports, DEFAULT_MAX_MEMORY_PAGES } from '../inspect/inspect-module.ts';
import type { FuncRunRequest, FuncRunResult, FuncRuntime, FuncRuntimeOptions } from '../types.ts';
import { type LoadedModule, ModuleCache } from './module-cache.ts';
import type { RunTask, WorkerOutcome } from './protocol.ts';
import { INLINE_FUEL, INLINE_MAX_INPUT, InlineRunner } from './inline-runner.ts';
import { type LogSink, WorkerPool } from './worker-pool.ts';

const PAGE_BYTES = 65536;
const HASH = /^[0-9a-f]{64}$/;

/**
 * Creates the runtime the engine runs `func` steps with. Nothing starts until
 * the first run; idle workers do not keep the process alive, but call
 * `close()` when done.
 *
 * @example
 * const funcs = createFuncRuntime({ loadModule: (h) => readFile(`${dir}/modules/${h}.wasm`) });
 * const result = await funcs.run({ moduleHash, exportName: 'run', input, declaredImports: ['lookup'],
 *   recorded: [], clock: { nowMs, seed }, timeoutMs: 5000 });
 */
export function createFuncRuntime(opts: FuncRuntimeOptions): FuncRuntime {
  const maxMemoryPages = opts.maxMemoryPages ?? DEFAULT_MAX_MEMORY_PAGES;
  const maxHostAllocBytes = opts.maxHostAllocBytes ?? 4 * maxMemoryPages * PAGE_BYTES;
  const poolSize = opts.poolSize ?? 2;
  if (!Number.isInteger(poolSize) || poolSize < 1) throw new RangeError(`poolSize must be a positive integer, got ${poolSize}`);
  const runInline = opts.runInline ?? true;
  const cache = new ModuleCache(opts.loadModule, maxMemoryPages, opts.cacheSize ?? 128, runInline ? INLINE_FUEL : null);
  const pool = new WorkerPool({ size: poolSize, heapMb: opts.workerHeapMb ?? 256 });
  const inline = new InlineRunner(16);
  let closed = false;

  async function run(req: FuncRunRequest): Promise<FuncRunResult> {
    if (closed) return failed(FuncErrorCode.RUNTIME_CLOSED, 'the Func runtime is closed');
    const checked = checkRequest(req);
    if (typeof checked !== 'string') return failed(FuncErrorCode.BAD_RUN_REQUEST, checked.problem);
    let loaded: LoadedModule;
    try {
      loaded = await cache.get(req.moduleHash);
      checkDeclaredImports(loaded.inspection, req.declaredImports);
    } catch (err) {
      if (err instanceof FuncModuleError) return failed(err.code, err.message);
      return failed(FuncErrorCode.INVALID_MODULE, String(err));
    }
    const exportName = req.exportName ?? 'run';
    if (!loaded.inspection.exports.includes(exportName)) {
      return failed(
        FuncErrorCode.EXPORT_NOT_FOUND,
        `module ${req.moduleHash} exports no function "${exportName}" (it exports: ${loaded.inspection.exports.join(', ') || 'none'})`,
      );
    }
    const task: Omit<RunTask, 'id'> = {
      moduleHash: req.moduleHash,
      module: loaded.module,
      state: loaded.state,
      exportName,
      inputJson: checked,
      declaredImports: [...req.declaredImports],
      recorded: req.recorded.map(({ importName, request, response }) => ({ importName, request, response })),
      clock: { nowMs: req.clock.nowMs, seed: req.clock.seed },
      maxHostAllocBytes,
    };
    const onLog = opts.onLog;
    const log: LogSink = (level, message) => onLog?.({ moduleHash: req.moduleHash, level, message });
    if (req.signal?.aborted) return failed(FuncErrorCode.ABORTED, 'the run was abandoned before it started');
    if (loaded.inline !== null && checked.length <= INLINE_MAX_INPUT) {
      const outcome = await inline.run({ ...task, ...loaded.inline, id: 0 }, log);
      if (outcome !== null) return toResult(outcome, loaded);
    }
    return toResult(await pool.run(task, { timeoutMs: req.timeoutMs, onLog: log, queue: req.queue ?? '', signal: req.signal }), loaded);
  }

  return {
    run: (req) => run(req).catch((err: unknown) => failed(FuncErrorCode.WORKER_CRASHED, `unexpected runtime error: ${String(err)}`)),
    async close() {
      closed = true;
      inline.clear();
      await pool.close();
    },
  };
}

/** The input as JSON text, or what is wrong with the request. */
function checkRequest(req: FuncRunRequest): string | { problem: string } {
  if (typeof req.moduleHash !== 'string' || !HASH.test(req.moduleHash)) {
    return { problem: `moduleHash must be 64 lowercase hex digits (a sha256), got ${JSON.stringify(req.moduleHash)}` };
  }
  if (!(req.timeoutMs > 0) || !Number.isFinite(req.timeoutMs)) {
    return { problem: `timeoutMs must be a positive number, got ${req.timeoutMs}` };
  }
  if (!Number.isFinite(req.clock?.nowMs) || !Number.isFinite(req.clock?.seed)) {
    return { problem: 'clock.nowMs and clock.seed must be finite numbers' };
  }
  const gap = req.recorded.findIndex((r, i) => r.n !== i);
  if (gap >= 0) {
    return { problem: `recorded[${gap}] has n=${req.recorded[gap]?.n}; recorded calls must be numbered 0..k-1 in order` };
  }
  let inputJson: string | undefined;
  try {
    inputJson = JSON.stringify(req.input);
  } catch (err) {
    return { problem: `input is not JSON-serializable: ${String(err)}` };
  }
  return inputJson ?? { problem: 'input must be a JSON value (got undefined)' };
}

function toResult(outcome: WorkerOutcome, loaded: LoadedModule): FuncRunResult {
  switch (outcome.kind) {
    case 'done':
      return { status: 'done', output: outcome.output, calls: outcome.calls };
    case 'suspended':
      return { status: 'suspended', call: outcome.call };
    case 'failed':
      return failed(outcome.code, outcome.message);
    case 'trap': {
      // AssemblyScript's allocator ends in `unreachable` when memory.grow fails.
      const grew = outcome.funcIndex !== null && loaded.growSites().has(outcome.funcIndex);
      if (outcome.message === 'unreachable' && grew) {
        return failed(
          FuncErrorCode.MEMORY,
          `module ran out of memory: it needs more than its maximum of ${loaded.inspection.memoryMaxPages} pages (64 KiB each); process less data per step or raise --maximumMemory (cap applies)`,
        );
      }
      return failed(FuncErrorCode.TRAP, `module trapped: ${outcome.message}`);
    }
  }
}

function failed(code: string, message: string): FuncRunResult {
  return { status: 'failed', error: { code, message } };
}
