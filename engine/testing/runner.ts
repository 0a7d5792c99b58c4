import { randomUUID } from 'node:crypto';
import { DEFAULTS, type LogicVersion, type StepOutcome } from '../../contracts/index.ts';
import { initialCtx, type Instance, type JsonValue } from '../core/instance.ts';
import type { EffectDef } from '../executors/index.ts';
import type { Fake } from './fakes.ts';
import { apply, decisionOf, type Trace, type TraceEvent } from './trace.ts';

export interface RunOptions {
  env?: string;
  correlationId?: string;
  /** Safety net for definitions that retry forever. (Default: 10000) */
  maxEvents?: number;
}

export interface RunResult {
  instance: Instance;
  trace: Trace;
  /** Virtual milliseconds spent in retry backoff; nothing actually slept. */
  elapsedMs: number;
}

/**
 * The synchronous in-process runner (DESIGN.md §9): the engine's own core, no store, no queue,
 * no real timers. Every effect goes to a fake chosen by `fakeKey`; backoff advances a virtual
 * clock. The trace it returns replays with `replay()`.
 */
export class TestRunner {
  constructor(
    private readonly logic: LogicVersion,
    private readonly fakes: Record<string, Fake>,
  ) {}

  async run(input: JsonValue, opts: RunOptions = {}): Promise<RunResult> {
    const initial = newInstance(this.logic, input, opts);
    const trace: Trace = { logicHash: this.logic.hash, initial, entries: [] };
    let inst = initial;
    let elapsedMs = 0;
    let event: TraceEvent = { type: 'begin' };
    for (let n = 0; n < (opts.maxEvents ?? 10_000); n++) {
      const t = await apply(this.logic, inst, event);
      trace.entries.push({ event, decision: decisionOf(t) });
      inst = t.instance;
      elapsedMs += t.runAfterMs ?? 0;
      const running = inst.ctx.running;
      if (running === null || !['pending', 'processing', 'compensating'].includes(inst.state)) break;
      event = { type: 'outcome', outcome: await this.#call(inst) };
    }
    return { instance: inst, trace, elapsedMs };
  }

  async #call(inst: Instance): Promise<StepOutcome> {
    const running = inst.ctx.running!;
    const step = this.logic.steps[running.step]!;
    const def = (running.kind === 'step' ? step : step.compensate) as EffectDef;
    const key = fakeKey(def, inst.domain);
    const fake = this.fakes[key];
    if (fake === undefined) throw new Error(`no fake for ${key} (step ${running.step}); known: ${Object.keys(this.fakes).join(', ')}`);
    return fake({ step: running.step, kind: running.kind, input: running.input, attempt: running.attempt, idempotencyKey: running.idempotencyKey });
  }
}

/** `<handler><path>` for proxy (e.g. `payments/funds/reserve`), `<METHOD> <url>` for http, `func:<module>`. */
export function fakeKey(def: EffectDef, domain: string): string {
  switch (def.kind) {
    case 'proxy':
      return `${def.handler ?? domain}${def.path}`;
    case 'http':
      return `${def.method ?? DEFAULTS.method} ${def.url}`;
    case 'func':
      return `func:${def.module}`;
  }
}

function newInstance(logic: LogicVersion, input: JsonValue, opts: RunOptions): Instance {
  return {
    id: randomUUID(),
    env: opts.env ?? 'test',
    domain: logic.domain,
    logicId: logic.logicId,
    version: logic.version,
    logicHash: logic.hash,
    state: 'pending',
    input,
    output: null,
    currentStep: logic.start,
    error: null,
    generation: 0,
    correlationId: opts.correlationId ?? null,
    parentId: null,
    branchIndex: null,
    ctx: initialCtx(),
  };
}
