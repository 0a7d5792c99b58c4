import type { FlowErrorBody, LogicVersion, TransitionCause } from '../../contracts/index.ts';
import type { AttemptWrite, Command, Instance, JsonValue, Running } from './instance.ts';
import { keys } from './retry.ts';
import { copyJson } from './copy-json.ts';
import type { AttributeWrite } from './attributes.ts';

/**
 * What the core decided: the next instance, the cause (a row of the transition table), the
 * step_runs rows and commands to commit with it, and — for a retry — how long to wait.
 */
export interface Transition {
  instance: Instance;
  cause: TransitionCause;
  attempts: AttemptWrite[];
  commands: Command[];
  /** Pending or compensating: runnable again only after this many ms (database clock). */
  runAfterMs: number | null;
  /**
   * Steps whose entry in `ctx.outputs` this transition set or removed: the store writes only
   * these (migration 0011), so a step's commit costs the same at step 200 as at step 1.
   */
  outputsChanged: string[];
  /** Search attributes this transition set (null: unset); absent when it set none, as for any definition without attributes. */
  attributes?: Record<string, AttributeWrite>;
}

/** The `visit` field of a running attempt or a registration: present only from the second visit on. */
export function visitField(visit: number): { visit?: number } {
  return visit > 1 ? { visit } : {};
}

/**
 * A transition being built. The core works on a private copy of the instance, so the caller's
 * object never changes and a failed commit leaves nothing half-applied in memory.
 */
export class Draft {
  readonly instance: Instance;
  readonly attempts: AttemptWrite[] = [];
  readonly commands: Command[] = [];
  cause: TransitionCause;
  runAfterMs: number | null = null;
  /** Search attributes set so far (core/attributes.ts). */
  attributes: Record<string, AttributeWrite> | undefined;
  private readonly outputsChanged = new Set<string>();

  constructor(
    readonly logic: LogicVersion,
    from: Instance,
    cause: TransitionCause,
    /** The caller holds the lease and runs the next prepared attempt itself (a worker going on). */
    readonly goOn = false,
  ) {
    // Outputs are immutable values (nothing in the core changes one in place; test/engine/
    // outputs-immutable.test.ts holds it to that): copying their map, not each output, keeps a
    // transition's cost independent of how many steps came before it.
    const { outputs } = from.ctx;
    this.instance = copyJson({ ...from, ctx: { ...from.ctx, outputs: {} } });
    this.instance.ctx.outputs = { ...outputs };
    this.cause = cause;
  }

  get ctx() {
    return this.instance.ctx;
  }

  /** The number the next attempt of `step` gets in this generation. */
  nextAttempt(step: string): number {
    return (this.ctx.attempts[step] ?? 0) + 1;
  }

  /** Records a step's output where expressions see it (`steps.<name>`), in finishing order. */
  setOutput(step: string, output: JsonValue): void {
    this.ctx.outputs[step] = output;
    this.ctx.order = [...this.ctx.order.filter((s) => s !== step), step];
    this.outputsChanged.add(step);
  }

  /** Forgets a step's output (a rewind): expressions no longer see it, and the store drops it. */
  forgetOutput(step: string): void {
    delete this.ctx.outputs[step];
    this.ctx.order = this.ctx.order.filter((s) => s !== step);
    this.outputsChanged.add(step);
  }

  /**
   * Counts an entry into `step`. A step that already has an attempt in this generation is being
   * visited again (a loop back to it), unless `sameVisit` (the retry verb re-running it).
   */
  enterVisit(step: string, sameVisit: boolean): void {
    if (sameVisit || this.ctx.attempts[step] === undefined) return;
    this.ctx.visits = { ...this.ctx.visits, [step]: this.visitOf(step) + 1 };
  }

  /** The visit of `step` now under way in this generation (1: the first). */
  visitOf(step: string): number {
    return this.ctx.visits?.[step] ?? 1;
  }

  /**
   * Starts the next attempt of `step` in this generation — `running` for an effect, `parked` for
   * a wait — writes its row, and makes it the instance's running attempt.
   */
  startAttempt(step: string, input: JsonValue, state: 'running' | 'parked'): Running {
    const { id, generation } = this.instance;
    const visit = this.visitOf(step);
    const idempotencyKey = keys.step(id, step, generation, visit);
    const attempt = this.nextAttempt(step);
    const seq = this.insertAttempt({ step, attempt, kind: 'step', state, input, output: null, error: null, idempotencyKey });
    this.ctx.running = { seq, kind: 'step', step, attempt, budgetStart: attempt, generation, input, idempotencyKey, ...visitField(visit) };
    return this.ctx.running;
  }

  /** Writes a new attempt row and returns its sequence number. */
  insertAttempt(row: Omit<Extract<AttemptWrite, { op: 'insert' }>, 'op' | 'seq' | 'generation'>): number {
    const seq = this.ctx.seq++;
    if (row.kind === 'step') this.ctx.attempts[row.step] = row.attempt;
    this.attempts.push({ op: 'insert', seq, generation: this.instance.generation, ...row });
    return seq;
  }

  finishAttempt(running: Running, state: 'succeeded' | 'failed' | 'parked' | 'superseded', output: JsonValue, error: FlowErrorBody | null) {
    this.attempts.push({ op: 'finish', seq: running.seq, state, output, error });
  }

  /**
   * The transition with its final state. The hand-over rule lives here and nowhere else: a
   * prepared effect is `processing` only for a caller that holds the lease, goes on, and has no
   * backoff to wait; for anyone else — a new instance, a verb, a completion, a wake-up applied by
   * a stopping worker — it waits as `pending`, for any worker to claim.
   */
  done(): Transition {
    if (this.instance.state === 'processing' && (!this.goOn || this.runAfterMs !== null)) this.instance.state = 'pending';
    return {
      instance: this.instance,
      cause: this.cause,
      attempts: this.attempts,
      commands: this.commands,
      runAfterMs: this.runAfterMs,
      outputsChanged: [...this.outputsChanged],
      ...(this.attributes === undefined ? {} : { attributes: this.attributes }),
    };
  }
}
