import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { type LogicVersion, type StepDef, TERMINAL_STATES } from '../../contracts/index.ts';
import { durationMs } from '../core/durations.ts';
import type { Instance } from '../core/instance.ts';
import type { Transition } from '../core/transition.ts';
import type { EffectResult } from '../executors/index.ts';
import type { Db } from '../store/db.ts';
import { limitLoads, type PermitNeed, type PermitWait } from '../store/permits.ts';
import { readGauges } from '../store/read-gauges.ts';
import { readCircuits } from '../store/circuits.ts';
import { HOLD_CODES } from '../core/hold.ts';
import type { Stored } from '../store/rows.ts';
import type { SlaBreachFired } from '../store/timers.ts';
import { asScheduler } from '../store/tx.ts';
import type { TransitionObserver } from './observer.ts';

/**
 * The engine's Prometheus metrics (`flow_*`). Gauges that describe the database are read with one
 * query per scrape (`readGauges`), so every node reports the same numbers; histograms and
 * counters count what this process did, and Prometheus sums them across nodes.
 */
export class EngineMetrics implements TransitionObserver {
  readonly registry = new Registry();
  readonly #db: Db;
  readonly #instances = new Gauge({ name: 'flow_instances', help: 'Instances that have not ended, by env, logic id and state', labelNames: ['env', 'logic_id', 'state'], registers: [this.registry] });
  readonly #runnable = new Gauge({ name: 'flow_runnable_instances', help: 'Instances a worker could claim now (the runnable queue depth)', registers: [this.registry] });
  readonly #oldest = new Gauge({ name: 'flow_oldest_runnable_age_seconds', help: 'How long the oldest runnable instance has been runnable (0: none); the number to autoscale on', registers: [this.registry] });
  readonly #parked = new Gauge({ name: 'flow_parked_instances', help: 'Waiting instances by env and what they wait for: decision, message, callback, delay or children', labelNames: ['env', 'reason'], registers: [this.registry] });
  readonly #stepSeconds = new Histogram({
    name: 'flow_step_duration_seconds',
    help: 'How long executing one attempt took, by effect kind (proxy, http, func, or compensation:<kind>) and outcome',
    labelNames: ['kind', 'outcome'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  });
  readonly #retries = new Counter({ name: 'flow_retries_total', help: 'Retries scheduled after a transient failure, of steps or compensations', labelNames: ['kind'], registers: [this.registry] });
  readonly #deadLetters = new Counter({ name: 'flow_dead_letters_total', help: 'Instances that went to dead_lettered, by env and logic id', labelNames: ['env', 'logic_id'], registers: [this.registry] });
  readonly #compensations = new Counter({ name: 'flow_compensations_total', help: 'Compensation attempts executed, by outcome', labelNames: ['outcome'], registers: [this.registry] });
  readonly #ended = new Counter({ name: 'flow_instances_ended_total', help: 'Instances that reached a terminal state, by env, logic id and state', labelNames: ['env', 'logic_id', 'state'], registers: [this.registry] });
  readonly #slaBreaches = new Counter({
    name: 'flow_sla_breaches_total',
    help: 'SLA breaches recorded, by env, logic id and step ("" for the instance\'s own SLA)',
    labelNames: ['env', 'logic_id', 'step'],
    registers: [this.registry],
  });
  readonly #circuitOpen = new Gauge({ name: 'flow_circuit_open', help: 'Handler circuits open now (1), by handler profile and env: its calls wait', labelNames: ['handler', 'env'], registers: [this.registry] });
  readonly #holds = new Counter({
    name: 'flow_holds_total',
    help: 'Attempts held without using one, by reason: throttled (the service answered 429/503) or circuit_open',
    labelNames: ['reason'],
    registers: [this.registry],
  });
  readonly #timerLateness = new Histogram({
    name: 'flow_timer_lateness_seconds',
    help: 'How long after it was due a delay or deadline timer fired (database clock)',
    labelNames: ['purpose'],
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [this.registry],
  });

  readonly #limitInFlight = new Gauge({ name: 'flow_limit_in_flight', help: 'Permits held now per limited resource (handler:<NAME> or key:<logicId>:<step>), by scope (an env, or * for every env)', labelNames: ['scope', 'resource'], registers: [this.registry] });
  readonly #limitWaiting = new Gauge({ name: 'flow_limit_waiting', help: 'Instances waiting for a permit per limited resource, by scope', labelNames: ['scope', 'resource'], registers: [this.registry] });
  readonly #limitGranted = new Counter({ name: 'flow_limit_granted_total', help: 'Permits this process took per limited resource (its rate() is the calls let through)', labelNames: ['scope', 'resource'], registers: [this.registry] });
  readonly #limitWaits = new Counter({ name: 'flow_limit_waits_total', help: 'Times work waited for a permit, by resource and reason (concurrency or rate)', labelNames: ['scope', 'resource', 'reason'], registers: [this.registry] });

  constructor(db: Db) {
    this.#db = db;
  }

  /** The Prometheus text exposition: the database gauges read afresh, then everything. */
  async render(): Promise<{ contentType: string; body: string }> {
    const [rows, circuits] = await asScheduler(this.#db, async (c) => [await readGauges(c), await readCircuits(c)] as const);
    this.#circuitOpen.reset();
    for (const k of circuits) if (k.state === 'open') this.#circuitOpen.set({ handler: k.handler, env: k.env }, 1);
    // reset first: a label set that has gone from the database must go from the scrape too
    for (const g of [this.#instances, this.#parked, this.#runnable, this.#oldest]) g.reset();
    this.#runnable.set(0);
    this.#oldest.set(0);
    for (const r of rows) {
      if (r.metric === 'instances') this.#instances.set({ env: r.env_id!, logic_id: r.logic_id!, state: r.label! }, r.value);
      else if (r.metric === 'parked') this.#parked.set({ env: r.env_id!, reason: r.label! }, r.value);
      else if (r.metric === 'runnable') this.#runnable.set(r.value);
      else this.#oldest.set(r.value);
    }
    this.#limitInFlight.reset();
    this.#limitWaiting.reset();
    for (const l of await asScheduler(this.#db, (c) => limitLoads(c, null))) {
      this.#limitInFlight.inc({ scope: l.scope, resource: l.resource }, l.inFlight);
      this.#limitWaiting.inc({ scope: l.scope, resource: l.resource }, l.waiting);
    }
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }

  /** An attempt was executed (before its outcome is committed). */
  onAttempt(logic: LogicVersion, instance: Instance, result: EffectResult, seconds: number): void {
    const running = instance.ctx.running;
    if (running === null) return;
    const step = logic.steps[running.step];
    const compensation = running.kind === 'compensation';
    const kind = compensation ? `compensation:${step?.compensate?.kind}` : (step?.kind ?? 'unknown');
    const outcome = result.status === 'failed' ? (result.retryable ? 'failed_transient' : 'failed_permanent') : result.status;
    this.#stepSeconds.observe({ kind, outcome }, seconds);
    if (compensation) this.#compensations.inc({ outcome });
  }

  onPermits(_logic: LogicVersion, _instance: Instance, needs: readonly PermitNeed[], wait: PermitWait | null): void {
    if (wait !== null) this.#limitWaits.inc({ scope: wait.scope, resource: wait.resource, reason: wait.wakeInMs === null ? 'concurrency' : 'rate' });
    else for (const n of needs) this.#limitGranted.inc({ scope: n.scope, resource: n.resource });
  }

  onTransition(from: Instance, t: Transition, committed: boolean): void {
    if (!committed) return;
    // a hold finishes its row with a hold code and is no retry
    const hold = t.attempts.find((a) => a.op === 'finish' && a.state === 'failed' && (a.error?.code === HOLD_CODES.throttled || a.error?.code === HOLD_CODES.circuit));
    if (hold !== undefined) this.#holds.inc({ reason: hold.error?.code === HOLD_CODES.throttled ? 'throttled' : 'circuit_open' });
    else if (t.cause === 'retry_scheduled') this.#retries.inc({ kind: 'step' });
    if (t.cause === 'compensation_retry_scheduled') this.#retries.inc({ kind: 'compensation' });
    const to = t.instance.state;
    if (to === from.state || !TERMINAL_STATES.has(to as never)) return;
    this.#ended.inc({ env: t.instance.env, logic_id: t.instance.logicId, state: to });
    if (to === 'dead_lettered') this.#deadLetters.inc({ env: t.instance.env, logic_id: t.instance.logicId });
  }

  onSlaBreached(b: SlaBreachFired): void {
    this.#slaBreaches.inc({ env: b.env, logic_id: b.logicId, step: b.step ?? '' });
  }

  /**
   * A claimer applied the wakes of a woken instance. A timer fired at the row's `run_at` (set by
   * fire_due_timers()) and was due `delayMs` after the park committed (`updated_at`): both on the
   * database clock. A delay `until` a computed time is not observed (its due time is not on the row).
   */
  onWake(logic: LogicVersion, stored: Stored): void {
    const { instance, timing } = stored;
    const step = logic.steps[instance.currentStep ?? ''];
    if (timing === undefined || step === undefined) return;
    for (const wake of stored.wakes) {
      const iso = wake.purpose === 'delay' && step.kind === 'delay' ? step.duration : wake.purpose === 'deadline' ? deadlineOf(step) : undefined;
      if (iso === undefined) continue;
      const late = timing.runAt.getTime() - (timing.updatedAt.getTime() + durationMs(iso));
      this.#timerLateness.observe({ purpose: wake.purpose }, Math.max(0, late) / 1000);
    }
  }
}

/** The duration a step's `deadline` timer counts: a decision's deadline, a waitFor step's timeout. */
function deadlineOf(step: StepDef): string | undefined {
  if (step.kind === 'decision') return step.deadline;
  return step.kind === 'waitFor' ? step.timeout : undefined;
}
