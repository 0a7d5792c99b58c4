import { setTimeout as sleep } from 'node:timers/promises';
import type { StepOutcome } from '../../contracts/index.ts';
import type { JsonValue } from '../../engine/core/instance.ts';
import type { Executor } from '../../engine/executors/index.ts';
import { type DeliveryInfo, Gates, IdempotencyLedger } from './idempotency-ledger.ts';

/** Computes the outcome of an operation the first time its key is called with success. */
export type FuncOperation = (input: JsonValue, info: DeliveryInfo) => StepOutcome;

/** What a gate sees of a call: the delivery and the step input. */
export type GatedCall = DeliveryInfo & { input: JsonValue };

export interface LedgerExecutorOptions {
  operations: Record<string, FuncOperation>;
  latencyMs?: () => number;
  /** Asked as each call arrives: did the store already commit this key's success? */
  committed?: (info: DeliveryInfo) => Promise<boolean>;
}

/** The smallest valid wasm module: versions must name modules the store holds, and nothing runs it. */
const EMPTY_WASM = new Uint8Array([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0]);
const EMPTY_WASM_SHA256 = '93a44bbb96c751218e4c00d479e4c14358122a389acca16205b1e4d0dc5f9476';

/** The module every `funcStep` names; the executor ignores the bytes and dispatches on `export`. */
export const TEST_MODULES = { ops: { sha256: EMPTY_WASM_SHA256, imports: {} } };
/** Its bytes, to upload with the versions that name it (`engine.publishVersion(env, doc, TEST_MODULE_BYTES)`). */
export const TEST_MODULE_BYTES: Record<string, Uint8Array> = { [EMPTY_WASM_SHA256]: EMPTY_WASM };

/** A func step (or compensation action) that calls `op` of the in-process owning service. */
export const func = (op: string) => ({ kind: 'func' as const, module: 'ops', export: op });

function classify(o: StepOutcome): 'success' | 'transient' | 'refused' {
  if (o.status !== 'failed') return 'success';
  return o.retryable ? 'transient' : 'refused';
}

/**
 * An in-process owning service behind the `func` executor: every call goes through the
 * idempotency ledger, and a test can hold a call after its effect — the worker then sits between
 * execute and commit until the test releases it.
 */
export class LedgerExecutor {
  readonly ledger = new IdempotencyLedger<StepOutcome>(classify);
  readonly gates = new Gates<GatedCall>();

  constructor(private readonly opts: LedgerExecutorOptions) {}

  /** The executor to give an engine; `via` tags its calls (to tell two engines apart). */
  executor(via = 'engine'): Executor<'func'> {
    return async (def, a) => {
      const op = def.export ?? 'run';
      const operation = this.opts.operations[op];
      if (operation === undefined) throw new Error(`no test operation ${op}`);
      const info: DeliveryInfo = {
        key: a.running.idempotencyKey,
        attempt: a.running.attempt,
        op,
        workflowId: a.instance.id,
        via,
        kind: a.running.kind,
      };
      const afterCommit = (await this.opts.committed?.(info)) ?? false;
      const { result } = this.ledger.deliver(info, () => operation(a.input, info), { afterCommit });
      const ms = this.opts.latencyMs?.() ?? 0;
      if (ms > 0) await sleep(ms);
      await this.gates.pass({ ...info, input: a.input });
      return result;
    };
  }
}

export const outcomes = {
  ok: (output: JsonValue = null): StepOutcome => ({ status: 'succeeded', output }),
  unavailable: (): StepOutcome => ({ status: 'failed', retryable: true, error: { code: 'HTTP_503', message: 'unavailable', status: 503 } }),
  refused: (): StepOutcome => ({ status: 'failed', retryable: false, error: { code: 'HTTP_422', message: 'refused', status: 422 } }),
};
