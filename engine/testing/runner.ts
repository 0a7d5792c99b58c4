import { randomUUID } from 'node:crypto';
import type { IngestEventResponse } from '../../contracts/api/events.ts';
import {
  canonicalJson,
  DEFAULTS,
  FlowError,
  isAllowedTransition,
  type LogicVersion,
  type StepOutcome,
  type Target,
  TERMINAL_STATES,
  type WorkflowState,
} from '../../contracts/index.ts';
import type { FuncRuntime } from '../../host-functions/index.ts';
import type { AttributeWrite } from '../core/attributes.ts';
import { byCancelOrder, childCancelEvent, childInstance, childrenStateOf } from '../core/children.ts';
import { Refused } from '../core/errors.ts';
import { messageTriggersOn, type PlannedRoute, planRoutes, planStart, type RouteMatch, type RoutedEvent, routeLimitProblem, startTriggerOn } from '../core/event-routes.ts';
import { isUnstarted } from '../core/flow.ts';
import { type Command, createInstance, type Instance, type JsonValue, type Running, type TimerPurpose } from '../core/instance.ts';
import type { Transition } from '../core/transition.ts';
import { claimedWork } from '../core/journal.ts';
import { DEFAULT_MESSAGE_BUFFER_MAX, planDelivery, waitingOn } from '../core/messages.ts';
import { MigrateRefused, migrationRefusal, renameProblems, type StepRenames } from '../core/migrate.ts';
import { timerDueMs } from '../core/park.ts';
import { type AppliedCallback, answerRepeatedCallback } from '../core/repeated-callback.ts';
import type { ChildrenState, ResumeArgs } from '../core/wake.ts';
import { funcExecutor } from '../executors/func.ts';
import type { Attempt, EffectDef, Executors } from '../executors/index.ts';
import { EventKeyReused, MigrateBadRename, MigrateBadTarget, TriggerInputInvalid, TriggerRouteInvalid } from '../errors.ts';
import { executeAttempt } from '../runtime/execute-attempt.ts';
import { ResumeTokens } from '../runtime/resume-tokens.ts';
import { checkStorable, DEFAULT_MAX_INPUT_BYTES } from '../runtime/storable.ts';
import type { Fake, FakeCall } from './fakes.ts';
import { apply, decisionOf, replay, type Trace, type TraceEntry, type TraceEvent } from './trace.ts';

/** True when the instance is parked on a waitFor step and a message of its name is buffered. */
function takesBuffered(flow: Flow): boolean {
  const name = waitingOn(flow.logic, flow.instance);
  return name !== null && flow.buffered.some((m) => m.name === name);
}

/** Signs the resume-token header executeAttempt sends; fakes never check it. */
const RUNNER_TOKENS = new ResumeTokens('sentin8-flow-test-runner');
/** 2025-01-01T00:00:00Z: a fixed start, so that runs (and `until` delays) are reproducible. */
const DEFAULT_START_MS = Date.UTC(2025, 0, 1);

export interface RunnerOptions {
  /**
   * Further LogicVersions that `children` steps may spawn; the runner's own LogicVersion is always
   * known. A spawn without a pinned version takes the highest version given. (Default: none)
   */
  logics?: readonly LogicVersion[];
  /**
   * Runs `func` steps' real WASM modules. Each host call goes to the fake keyed
   * `host:<handler><path>` of the import's Target (handler defaults to the domain), and is recorded
   * through the core's `onProgress` exactly as engine/executors/func.ts does. Without it, the fake
   * `func:<module>` replaces the whole step. (Default: none)
   */
  funcRuntime?: FuncRuntime;
  /** Where the virtual clock starts, in ms since the epoch. (Default: 2025-01-01T00:00:00Z) */
  startMs?: number;
  /**
   * Called after each event is applied to the core and appended to its instance's trace. Throwing
   * from it simulates a crash: the runner stops there (discard it), and the trace holds exactly
   * what was committed, ready for `restore()`. (Default: none)
   */
  onEvent?: (flow: FlowHandle, entry: TraceEntry) => void;
  /** How many messages may wait per instance for their waitFor step, as FLOW_MESSAGE_BUFFER_MAX. (Default: 100) */
  maxBufferedMessages?: number;
  /** The cap on an event's payload and on what a message trigger builds, as FLOW_MAX_INPUT_BYTES. (Default: 1 MiB) */
  maxInputBytes?: number;
}

/** What `event()` answered: the engine's answer to `POST …/events` (`IngestEventResponse`). */
export type EventSent = IngestEventResponse;

export interface EventOptions {
  /** The event's idempotency key: a repeat in the env starts and delivers nothing and answers as the first did. (Default: a fresh one per call) */
  key?: string;
  /** The environment it is posted to: it starts instances there and reaches only instances there. (Default: `test`) */
  env?: string;
}

export interface MigrateOptions {
  /** The steps of the version it moves from renamed in the target, as the engine's rename map: `{ approval: 'review' }`. (Default: none) */
  renames?: StepRenames;
  /** The version the migration moves instances of (the engine's `fromVersion`): an instance on another is FLOW_MIGRATE_WRONG_VERSION. (Default: the one it is on) */
  fromVersion?: number;
}

/** What `send()` answered: as the engine's 200 (`delivered`) or 202 (`buffered`). */
export interface MessageSent {
  status: 'delivered' | 'buffered';
}

export interface RunOptions {
  /** The instance's environment; children inherit it. (Default: `test`) */
  env?: string;
  /** Carried into `workflow.correlationId` and to every child. (Default: null) */
  correlationId?: string;
  /** The instance id; idempotency keys start with it. (Default: a random UUID) */
  id?: string;
  /** Safety net: the most core events this instance and its children may use in all. (Default: 10000) */
  maxEvents?: number;
}

export interface RunResult {
  instance: Instance;
  trace: Trace;
  /** Virtual milliseconds that passed (retry backoff); nothing actually slept. */
  elapsedMs: number;
  flow: FlowHandle;
}

/** A delay or deadline timer that has not fired yet. */
export interface VirtualTimer {
  purpose: TimerPurpose;
  /** The parked attempt it was set for. */
  seq: number;
  fireAtMs: number;
}

export type OutboxCommand = Extract<Command, { type: 'outbox' }>;

/**
 * One instance in the runner. Every method drives the whole runner — this instance, its children,
 * any other instance — until nothing is runnable: each is terminal or parked.
 */
export interface FlowHandle {
  readonly logic: LogicVersion;
  /** The instance as last committed. */
  readonly instance: Instance;
  /** Every input the core got for this instance, with its decision. */
  readonly trace: Trace;
  readonly parent: FlowHandle | null;
  /** Spawned children, in spawn and item order. */
  readonly children: readonly FlowHandle[];
  /** The seq of the last attempt a fake answered 202 waiting: the one `complete()` completes by default. */
  readonly parkedSeq: number | null;
  /** True when the parent's fail_fast (or cancel) cancelled it: its trace holds that `cancel` verb. */
  readonly cancelledByParent: boolean;
  /** Events written to the outbox (emit steps), in commit order. */
  readonly outbox: readonly OutboxCommand[];
  /** Timers armed for this instance and not fired yet. */
  readonly timers: readonly VirtualTimer[];
  /** Moves the virtual clock by `ms` and fires every timer that falls due, in time order. */
  advance(ms: number): Promise<Instance>;
  /** An approver answers the decision the instance is parked on (core `onResume`). Refused: nothing changes. */
  resume(args: ResumeArgs): Promise<Instance>;
  /**
   * The owning service completes a step it answered with 202 (core `onCallback`), by default the
   * one in `parkedSeq`. A repeat is answered as the engine answers it and changes nothing: the same
   * body as the completion applied for that attempt answers as it did, another body is
   * FLOW_CALLBACK_ANSWERED_DIFFERENTLY, and a token whose attempt took no completion is FLOW_STALE_TOKEN.
   */
  complete(outcome: StepOutcome, opts?: { seq?: number }): Promise<Instance>;
  /**
   * Delivers message `name`, as `POST …/messages/{name}` does (docs/messages.md): handed to the
   * waitFor step the instance is parked on, or buffered in arrival order until it reaches one. A
   * repeat of `key` (a duplicate) is answered with the first answer and changes nothing; a message
   * sent before its step, or before others, is the out-of-order case. Refusals throw the engine's
   * codes. (`key` default: a fresh one per call)
   */
  send(name: string, payload: JsonValue, opts?: { key?: string }): Promise<MessageSent>;
  /** Messages delivered and not yet taken by a waitFor step, oldest first. `restore()` does not bring them back: a trace holds only what was taken. */
  readonly buffered: readonly { name: string; payload: JsonValue }[];
  /**
   * The migrate verb (docs/versions.md, "Migrating instances") on this instance: moves it to
   * version `toVersion` of its definition (one the runner was given), by the engine's rule
   * (core/migrate.ts) and journalled as the engine journals it, so `replay(logic, trace, { versions })`
   * replays across the move. Refusals throw the engine's codes and change nothing. Its timers stay
   * armed. (Once a call returns, a runner's instance is parked or ended, never between steps:
   * retry backoff passes on the virtual clock at once.)
   */
  migrate(toVersion: number, opts?: MigrateOptions): Promise<Instance>;
}

/**
 * The synchronous in-process runner (ARCHITECTURE.md, Code map: engine/testing): the engine's own core, no store, no queue, no
 * real timers. Effects go to fakes chosen by `fakeKey` (func steps optionally to a real module
 * runtime); delays, deadlines and retry backoff use a manual virtual clock; children run in the
 * same runner. Every input to the core lands in a trace that `replay()` re-derives without calls.
 */
export class TestRunner {
  readonly #sim: Simulation;
  readonly #logic: LogicVersion;

  constructor(logic: LogicVersion, fakes: Record<string, Fake>, opts: RunnerOptions = {}) {
    this.#logic = logic;
    this.#sim = new Simulation([logic, ...(opts.logics ?? [])], fakes, opts);
  }

  /** The virtual clock, in ms since the epoch. */
  get now(): number {
    return this.#sim.now;
  }

  /** Creates an instance, begins it and drives it until it is terminal or parked. */
  start(input: JsonValue, opts: RunOptions = {}): Promise<FlowHandle> {
    return this.#sim.start(this.#logic, input, opts);
  }

  /** `start()` for callers that only want the end of the run. */
  async run(input: JsonValue, opts: RunOptions = {}): Promise<RunResult> {
    const from = this.now;
    const flow = await this.start(input, opts);
    return { instance: flow.instance, trace: flow.trace, elapsedMs: this.now - from, flow };
  }

  /**
   * Picks up an instance from its committed trace (after a simulated crash): replays it to the last
   * committed instance without calling anything, re-arms its unfired timers and pending backoff,
   * and drives it on. An instance parked on children cannot be restored (their traces are separate).
   */
  restore(trace: Trace, opts: Pick<RunOptions, 'maxEvents'> = {}): Promise<FlowHandle> {
    return this.#sim.restore(trace, opts);
  }

  /** Moves the virtual clock by `ms` and fires every timer that falls due, in time order. */
  async advance(ms: number): Promise<void> {
    await this.#sim.advance(ms);
  }

  /**
   * Posts an event, as `POST /v1/envs/{env}/events` does (docs/messages.md, "From an event"): each
   * definition the runner knows with a start trigger on `type` starts one instance of its highest
   * version (the runner retires none), and each version with a message trigger on it delivers the
   * message to the live instances in `env` its match selects, by the rule `send()` follows, under
   * the key `event:<key>:<message>`. Answers as the engine does (`ids`, `delivered` with per-instance
   * refusals, `created`, `matched`); a trigger that cannot start or deliver refuses the whole event
   * (FLOW_TRIGGER_INPUT_INVALID, FLOW_TRIGGER_ROUTE_INVALID) before anything changes, and a key
   * reused by another event is FLOW_EVENT_KEY_REUSED. The runner acts as the operator: no grant is checked.
   */
  event(type: string, payload: JsonValue, opts: EventOptions = {}): Promise<EventSent> {
    return this.#sim.event(type, payload, opts.key ?? randomUUID(), opts.env ?? 'test');
  }

  /** The instance with this id (started, spawned, restored or started by an event), as last restored. */
  flow(id: string): FlowHandle | undefined {
    return this.#sim.flows.get(id);
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

/** `host:<handler><path>`: the fake that answers a func module's host calls to `target`. */
export function hostFakeKey(target: Target, domain: string): string {
  return `host:${target.handler ?? domain}${target.path}`;
}

/** The completion the trace applied for attempt `seq`, as the engine reads it from its journal. */
function appliedCallback(trace: Trace, seq: number): AppliedCallback | null {
  const e = trace.entries.find((x) => x.event.type === 'callback' && x.event.seq === seq && x.decision !== null);
  return e === undefined || e.event.type !== 'callback' || e.decision === null ? null : { outcome: e.event.outcome, state: e.decision.state };
}

const RUNNABLE = new Set(['pending', 'processing', 'compensating']);

type Item =
  | { kind: 'run'; at: number; n: number; flow: Flow }
  | { kind: 'timer'; at: number; n: number; flow: Flow; purpose: TimerPurpose; seq: number };

class Flow implements FlowHandle {
  instance: Instance;
  /** The version it runs: the one it began on, until a migration moves it. */
  logic: LogicVersion;
  readonly trace: Trace;
  readonly children: Flow[] = [];
  readonly outbox: OutboxCommand[] = [];
  parkedSeq: number | null = null;
  cancelledByParent = false;
  readonly buffered: { name: string; payload: JsonValue }[] = [];
  /** The answer each Idempotency-Key got, given again to a repeat. */
  readonly answered = new Map<string, MessageSent>();
  /** Its search attributes as the store would hold them: what a message trigger's attribute match reads. */
  readonly attributes = new Map<string, NonNullable<AttributeWrite>>();
  /** Core events used by this tree (counted on the root). */
  events = 0;
  readonly root: Flow;

  constructor(
    readonly sim: Simulation,
    logic: LogicVersion,
    initial: Instance,
    readonly parent: Flow | null,
    readonly maxEvents: number,
  ) {
    this.logic = logic;
    this.instance = initial;
    this.trace = { logicHash: logic.hash, initial: structuredClone(initial), entries: [] };
    this.root = parent?.root ?? this;
    sim.flows.set(initial.id, this);
  }

  get timers(): VirtualTimer[] {
    return this.sim.timersOf(this);
  }

  async advance(ms: number): Promise<Instance> {
    await this.sim.advance(ms);
    return this.instance;
  }

  resume(args: ResumeArgs): Promise<Instance> {
    return this.sim.deliver(this, { type: 'resume', args });
  }

  complete(outcome: StepOutcome, opts: { seq?: number } = {}): Promise<Instance> {
    // no token at all is as stale as an old one: the core refuses it
    return this.sim.deliver(this, { type: 'callback', seq: opts.seq ?? this.parkedSeq ?? -1, outcome });
  }

  send(name: string, payload: JsonValue, opts: { key?: string } = {}): Promise<MessageSent> {
    return this.sim.send(this, name, payload, opts.key ?? randomUUID());
  }

  migrate(toVersion: number, opts: MigrateOptions = {}): Promise<Instance> {
    return this.sim.migrate(this, toVersion, opts);
  }
}

/** The runner's shell around the core: a virtual clock, an agenda of work and timers, and fan-in. */
class Simulation {
  now: number;
  readonly #logics: readonly LogicVersion[];
  readonly #fakes: Record<string, Fake>;
  readonly #opts: RunnerOptions;
  #items: Item[] = [];
  #n = 0;
  /** Parents to tell that a child ended, once nothing is runnable (the engine's `children` timer rows). */
  #signals: { flow: Flow; seq: number }[] = [];
  #busy = false;
  /** Instances sent a message: the ones whose buffer the settle loop looks at. */
  readonly #withMessages = new Set<Flow>();
  /** Every instance by id, in creation order (a restored one replaces its earlier handle): what events are routed to. */
  readonly flows = new Map<string, Flow>();
  /** The events posted, by env and key, with what each answered (the engine's `events` rows). */
  readonly #events = new Map<string, { type: string; payload: string; answer: EventSent }>();

  constructor(logics: readonly LogicVersion[], fakes: Record<string, Fake>, opts: RunnerOptions) {
    this.#logics = logics;
    this.#fakes = fakes;
    this.#opts = opts;
    this.now = opts.startMs ?? DEFAULT_START_MS;
  }

  start(logic: LogicVersion, input: JsonValue, opts: RunOptions): Promise<FlowHandle> {
    return this.#exclusive(async () => {
      const flow = new Flow(this, logic, newInstance(logic, input, opts), null, opts.maxEvents ?? 10_000);
      this.#schedule(flow, await this.#commit(flow, { type: 'begin' }));
      await this.#settle(this.now);
      return flow;
    });
  }

  restore(trace: Trace, opts: Pick<RunOptions, 'maxEvents'>): Promise<FlowHandle> {
    return this.#exclusive(async () => {
      const first = this.#logics.find((l) => l.hash === trace.logicHash);
      if (first === undefined) throw new Error(`the runner does not know the LogicVersion ${trace.logicHash} the trace was recorded on`);
      // a migrated trace goes on with the version it moved to; replay names one the runner lacks
      const instance = await replay(first, trace, { versions: this.#logics });
      const logic = this.#logics.find((l) => l.hash === instance.logicHash)!;
      const running = instance.ctx.running;
      if (instance.state === 'waiting' && running !== null && logic.steps[running.step]?.kind === 'children') {
        throw new Error(`cannot restore ${instance.id}: it is parked on children, whose runs are not in its trace`);
      }
      const flow = new Flow(this, first, structuredClone(trace.initial), null, opts.maxEvents ?? 10_000);
      flow.logic = logic;
      flow.instance = instance;
      flow.trace.entries.push(...structuredClone(trace.entries));
      for (const e of trace.entries) setAttributes(flow, e.decision?.attributes);
      const last = trace.entries.at(-1);
      this.now = Math.max(this.now, last?.atMs ?? this.now);
      // re-arm what the committed decisions armed: unfired timers, and the backoff of the last one
      const fired = new Set<string>();
      for (const e of trace.entries) if (e.event.type === 'timer') fired.add(`${e.event.purpose}:${e.event.seq}`);
      for (const e of trace.entries) {
        for (const a of e.decision?.attempts ?? []) if (a.op === 'finish' && a.state === 'parked') flow.parkedSeq = a.seq;
        for (const c of e.decision?.commands ?? []) {
          if (c.type === 'timer' && !fired.has(`${c.purpose}:${c.seq}`)) this.#arm(flow, c, e.atMs);
          if (c.type === 'outbox') flow.outbox.push(c);
        }
      }
      if (last === undefined) {
        this.#schedule(flow, await this.#commit(flow, { type: 'begin', claimed: instance.parentId !== null }));
      } else if (this.#runnable(instance)) {
        const wait = [...trace.entries].reverse().find((e) => e.decision !== null)?.decision?.runAfterMs ?? null;
        this.#push({ kind: 'run', at: wait === null ? this.now : last.atMs + wait, flow });
      }
      await this.#settle(this.now);
      return flow;
    });
  }

  async advance(ms: number): Promise<void> {
    if (!Number.isFinite(ms) || ms < 0) throw new RangeError(`advance takes a finite, non-negative number of ms, not ${ms}`);
    await this.#exclusive(() => this.#settle(this.now + ms));
  }

  /**
   * An input from outside (resume, callback): refused inputs throw and change nothing. A callback
   * for an attempt that is over is answered by the engine's rule (core `answerRepeatedCallback`).
   */
  deliver(flow: Flow, event: TraceEvent): Promise<Instance> {
    return this.#exclusive(async () => {
      let t: Transition | null;
      try {
        t = await this.#commit(flow, event);
      } catch (err) {
        if (event.type !== 'callback' || (err as { code?: string }).code !== 'FLOW_STALE_TOKEN') throw err;
        answerRepeatedCallback(flow.instance.id, appliedCallback(flow.trace, event.seq), event.outcome, err);
        return flow.instance;
      }
      this.#schedule(flow, t);
      await this.#settle(this.now);
      return flow.instance;
    });
  }

  /** A message from outside: delivered or buffered by the core's rule (core/messages.ts), keyed like the engine's. */
  send(flow: Flow, name: string, payload: JsonValue, key: string): Promise<MessageSent> {
    return this.#exclusive(async () => {
      const answer = await this.#offer(flow, name, payload, key);
      await this.#settle(this.now);
      return answer;
    });
  }

  /**
   * One delivery, as the engine's `deliverIn`: a repeated key answers as the first did; otherwise
   * the core's rule hands the message to the step it is parked on or buffers it. Throws the core's
   * refusal before anything changes. Leaves the instance on the agenda, not driven.
   */
  async #offer(flow: Flow, name: string, payload: JsonValue, key: string): Promise<MessageSent> {
    const first = flow.answered.get(key);
    if (first !== undefined) return first;
    const buffer = { olderOfName: flow.buffered.some((m) => m.name === name), count: flow.buffered.length, max: this.#opts.maxBufferedMessages ?? DEFAULT_MESSAGE_BUFFER_MAX };
    const plan = planDelivery(flow.logic, flow.instance, { name, payload }, buffer);
    const answer: MessageSent = { status: plan === 'deliver' ? 'delivered' : 'buffered' };
    flow.answered.set(key, answer);
    if (plan === 'buffer') {
      this.#withMessages.add(flow);
      flow.buffered.push({ name, payload: structuredClone(payload) });
      return answer;
    }
    this.#schedule(flow, await this.#commit(flow, { type: 'message', args: { name, payload } }));
    return answer;
  }

  /**
   * An event, as the engine's `ingestEvent` takes it (runtime/ingest-event.ts), on the runner's
   * instances: per definition (in logicId order) its start trigger, then each version's message
   * triggers. Every trigger is planned by the core before anything changes, so a refusal refuses
   * the whole event and records nothing; then the starts are begun and the messages delivered,
   * each instance's refusal recorded, and the runner driven to rest once, as the engine's workers
   * take over after its one transaction.
   */
  event(type: string, payload: JsonValue, key: string, env: string): Promise<EventSent> {
    return this.#exclusive(async () => {
      const maxBytes = this.#opts.maxInputBytes ?? DEFAULT_MAX_INPUT_BYTES;
      checkStorable('the event payload', payload, maxBytes);
      const recorded = JSON.stringify([env, key]);
      const seen = this.#events.get(recorded);
      if (seen !== undefined) {
        if (seen.type !== type || seen.payload !== canonicalJson(payload)) throw new EventKeyReused(key);
        return { ...structuredClone(seen.answer), created: false };
      }
      const event: RoutedEvent = { type, payload, idempotencyKey: key };
      const plans: { start: { logic: LogicVersion; input: JsonValue } | null; routes: { logic: LogicVersion; route: PlannedRoute }[] }[] = [];
      for (const logicId of [...new Set(this.#logics.filter((l) => l.triggers?.some((t) => t.event === type)).map((l) => l.logicId))].sort()) {
        const versions = this.#logics.filter((l) => l.logicId === logicId).sort((a, b) => a.version - b.version);
        const active = versions.at(-1)!;
        const trigger = startTriggerOn(active, type);
        let start = null;
        if (trigger !== undefined) {
          const planned = await planStart(active, trigger, event);
          if ('problems' in planned) throw new TriggerInputInvalid(type, `${logicId}@${active.version}`, planned.problems);
          start = { logic: active, input: planned.input };
        }
        const routes = [];
        for (const logic of versions) {
          if (messageTriggersOn(logic, type).length === 0) continue;
          const planned = await planRoutes(logic, event, maxBytes);
          if (planned.problems.length > 0) throw new TriggerRouteInvalid(type, `${logicId}@${logic.version}`, planned.problems);
          for (const route of planned.routes) {
            // counted before anything changes: the runner cannot roll back as the engine's transaction does
            const tooMany = route.match === null ? null : routeLimitProblem(this.#matching(logic, route.match, env).length);
            if (tooMany !== null) throw new TriggerRouteInvalid(type, `${logicId}@${logic.version}`, [tooMany]);
            routes.push({ logic, route });
          }
        }
        plans.push({ start, routes });
      }
      const ids: string[] = [];
      const delivered: EventSent['delivered'] = [];
      for (const { start, routes } of plans) {
        if (start !== null) {
          const flow = new Flow(this, start.logic, newInstance(start.logic, start.input, { env }), null, 10_000);
          this.#schedule(flow, await this.#commit(flow, { type: 'begin' }));
          ids.push(flow.instance.id);
        }
        for (const { logic, route } of routes) {
          if (route.match === null) continue;
          for (const flow of this.#matching(logic, route.match, env)) {
            const to = { workflowId: flow.instance.id, message: route.message };
            try {
              delivered.push({ ...to, status: (await this.#offer(flow, route.message, route.payload, route.key)).status });
            } catch (err) {
              // the core refuses before anything changes: the others still get it
              if (!(err instanceof Refused)) throw err;
              delivered.push({ ...to, status: 'refused', code: err.code });
            }
          }
        }
      }
      const answer: EventSent = { ids, delivered, created: true, matched: ids.length + delivered.length > 0 };
      this.#events.set(recorded, { type, payload: canonicalJson(payload), answer: structuredClone(answer) });
      await this.#settle(this.now);
      return answer;
    });
  }

  /** The live instances of `logic`'s version in `env` that a route's match selects, in id order (as store/correlated-instances.ts finds them). */
  #matching(logic: LogicVersion, match: RouteMatch, env: string): Flow[] {
    const selects = (f: Flow): boolean => {
      const i = f.instance;
      if (i.env !== env || i.logicId !== logic.logicId || i.version !== logic.version || TERMINAL_STATES.has(i.state)) return false;
      if ('correlationId' in match) return i.correlationId === match.correlationId;
      const a = f.attributes.get(match.attribute);
      return a !== undefined && a.type === match.type && a.value === match.value;
    };
    return [...this.flows.values()].filter(selects).sort((a, b) => (a.instance.id < b.instance.id ? -1 : a.instance.id > b.instance.id ? 1 : 0));
  }

  /**
   * The migrate verb on one instance (runtime/migrations.ts `apply`): both versions checked as
   * the engine checks them (a later version of the definition, a rename map that fits), the move
   * decided by the core and journalled as a `migrate` event. The agenda stays as it is: a parked
   * instance's timers and a retry's backoff carry over, as the store keeps its timers and `run_at`.
   */
  migrate(flow: Flow, toVersion: number, opts: MigrateOptions): Promise<Instance> {
    return this.#exclusive(async () => {
      const from = this.#version(flow.logic.logicId, opts.fromVersion ?? flow.instance.version);
      const to = this.#version(flow.logic.logicId, toVersion);
      if (to.version <= from.version) throw new MigrateBadTarget(from.logicId, from.version, to.version);
      const renames = { ...opts.renames };
      const problems = renameProblems(from, to, renames);
      if (problems.length > 0) throw new MigrateBadRename(problems);
      // asked of `from`: the instance may be on another version than the one the move names
      const refusal = migrationRefusal(from, to, flow.instance, renames);
      if (refusal !== null) throw new MigrateRefused(refusal);
      await this.#commit(flow, { type: 'migrate', from: { version: from.version, hash: from.hash }, to: { version: to.version, hash: to.hash }, renames });
      await this.#settle(this.now);
      return flow.instance;
    });
  }

  #version(logicId: string, version: number): LogicVersion {
    const found = this.#logics.find((l) => l.logicId === logicId && l.version === version);
    if (found === undefined) throw new Error(`the runner was not given ${logicId}@${version}: pass it in { logics }`);
    return found;
  }

  timersOf(flow: Flow): VirtualTimer[] {
    return this.#items
      .filter((i): i is Extract<Item, { kind: 'timer' }> => i.kind === 'timer' && i.flow === flow)
      .sort((a, b) => a.at - b.at || a.n - b.n)
      .map((i) => ({ purpose: i.purpose, seq: i.seq, fireAtMs: i.at }));
  }

  async #exclusive<T>(fn: () => Promise<T>): Promise<T> {
    if (this.#busy) throw new Error('the runner is still driving: await each call before making the next');
    this.#busy = true;
    try {
      return await fn();
    } finally {
      this.#busy = false;
    }
  }

  /**
   * Runs the agenda in time order until nothing is runnable and the next timer is after `limit`.
   * Retry backoff moves the clock on its own (firing any timer it passes); a child's ending reaches
   * its parent once every instance is at rest, the way the engine batches `children` wake-ups.
   */
  async #settle(limit: number): Promise<void> {
    for (;;) {
      // an instance that parked on a waitFor step takes its oldest buffered message at once
      const taker = [...this.#withMessages].find(takesBuffered);
      if (taker !== undefined) {
        const name = waitingOn(taker.logic, taker.instance)!;
        const at = taker.buffered.findIndex((m) => m.name === name);
        const [message] = taker.buffered.splice(at, 1);
        this.#schedule(taker, await this.#commit(taker, { type: 'message', args: { name, payload: message!.payload } }));
        continue;
      }
      const runs = this.#items.some((i) => i.kind === 'run');
      if (!runs && this.#signals.length > 0) {
        const { flow, seq } = this.#signals.shift()!;
        this.#schedule(flow, await this.#commit(flow, { type: 'children', seq, state: childrenState(flow, seq) }));
        continue;
      }
      let next: Item | undefined;
      for (const i of this.#items) if (next === undefined || i.at < next.at || (i.at === next.at && i.n < next.n)) next = i;
      if (next === undefined || (!runs && next.at > limit)) break;
      this.#items = this.#items.filter((i) => i !== next);
      this.now = Math.max(this.now, next.at);
      if (next.kind === 'run') await this.#drive(next.flow);
      else this.#schedule(next.flow, await this.#commit(next.flow, { type: 'timer', purpose: next.purpose, seq: next.seq }));
    }
    this.now = Math.max(this.now, limit);
  }

  /** The worker's loop: run prepared attempts of one instance while it has one and no backoff. */
  async #drive(flow: Flow): Promise<void> {
    while (this.#runnable(flow.instance)) {
      const inst = flow.instance;
      // never `wakes` here: the runner delivers a waiting instance's wake-ups as they fall due
      const work = claimedWork(inst);
      const event: TraceEvent = work.do === 'begin' ? work.event : await this.#execute(flow);
      const t = await this.#commit(flow, event);
      if (t !== null && t.runAfterMs !== null) {
        this.#schedule(flow, t);
        return;
      }
    }
  }

  #runnable(inst: Instance): boolean {
    if (isUnstarted(inst)) return inst.state === 'pending';
    return inst.ctx.running !== null && RUNNABLE.has(inst.state);
  }

  /** Leaves a runnable instance on the agenda: now, or after its backoff. */
  #schedule(flow: Flow, t: Transition | null): void {
    this.#items = this.#items.filter((i) => !(i.kind === 'run' && i.flow === flow));
    if (this.#runnable(flow.instance)) this.#push({ kind: 'run', at: this.now + (t?.runAfterMs ?? 0), flow });
  }

  #push(item: Omit<Extract<Item, { kind: 'run' }>, 'n'> | Omit<Extract<Item, { kind: 'timer' }>, 'n'>): void {
    this.#items.push({ ...item, n: this.#n++ } as Item);
  }

  #arm(flow: Flow, c: Extract<Command, { type: 'timer' }>, fromMs: number): void {
    this.#push({ kind: 'timer', at: timerDueMs(c, fromMs), flow, purpose: c.purpose, seq: c.seq });
  }

  /**
   * Applies one event to the core, appends it to the trace, and performs the transition's commands
   * (what the store would commit with it). A refusal throws before anything is recorded.
   */
  async #commit(flow: Flow, input: TraceEvent): Promise<Transition | null> {
    const root = flow.root;
    if (root.events >= root.maxEvents) {
      throw new Error(`${root.instance.id} used ${root.maxEvents} core events without coming to rest; raise maxEvents if that is expected`);
    }
    // the trace owns its copy: nothing a fake keeps can change it later
    const event = structuredClone(input);
    const before = flow.instance;
    const t = await apply(flow.logic, before, event, false, (hash) => this.#logics.find((l) => l.hash === hash));
    if (t !== null) refuseOutsideTable(before, event, t);
    root.events++;
    const entry: TraceEntry = { event, decision: t === null ? null : decisionOf(t), atMs: this.now };
    flow.trace.entries.push(entry);
    if (t !== null) {
      flow.instance = t.instance;
      if (event.type === 'migrate') flow.logic = this.#logics.find((l) => l.hash === event.to.hash)!;
      setAttributes(flow, t.attributes);
      for (const a of t.attempts) if (a.op === 'finish' && a.state === 'parked') flow.parkedSeq = a.seq;
      for (const c of t.commands) await this.#perform(flow, c);
      const ended = !TERMINAL_STATES.has(before.state) && TERMINAL_STATES.has(t.instance.state);
      // an ending drops the instance's timers, as the store's does (core/park.ts, timerDueMs)
      if (ended) this.#items = this.#items.filter((i) => !(i.kind === 'timer' && i.flow === flow));
      if (ended && flow.parent !== null && t.instance.parentSeq !== null) this.#signal(flow.parent, t.instance.parentSeq);
    }
    this.#opts.onEvent?.(flow, entry);
    return t;
  }

  async #perform(flow: Flow, c: Command): Promise<void> {
    switch (c.type) {
      case 'timer':
        this.#arm(flow, c, this.now);
        return;
      case 'outbox':
        flow.outbox.push(c);
        return;
      case 'spawn': {
        const logic = this.#logicFor(c.logicId, c.version);
        for (const [index, input] of c.inputs.entries()) {
          const child = new Flow(this, logic, childInstance(flow.instance, logic, c.seq, index, input), flow, flow.maxEvents);
          flow.children.push(child);
          this.#push({ kind: 'run', at: this.now, flow: child });
        }
        return;
      }
      case 'cancelChildren': {
        // as the engine does (runtime/cancel-tree.ts): each open child, in the core's order, takes
        // the core's own cancel — its attempt closed, with `compensate` its compensations run first —
        // and that cancel's own cancelChildren reaches the grandchildren. A cancel the table refuses
        // changes nothing.
        const event = childCancelEvent(c.compensate === true);
        for (const child of [...flow.children].sort((a, b) => byCancelOrder(a.instance, b.instance))) {
          if (TERMINAL_STATES.has(child.instance.state)) continue;
          let t: Transition | null;
          try {
            t = await this.#commit(child, event);
          } catch (err) {
            if (err instanceof FlowError && err.code === 'FLOW_VERB_NOT_ALLOWED') continue;
            throw err;
          }
          child.cancelledByParent = true;
          // what it waited for (timers, a pending fan-in) no longer concerns it
          this.#items = this.#items.filter((i) => i.flow !== child);
          this.#signals = this.#signals.filter((s) => s.flow !== child);
          this.#schedule(child, t);
        }
        return;
      }
    }
  }

  #signal(parent: Flow, seq: number): void {
    if (!this.#signals.some((s) => s.flow === parent && s.seq === seq)) this.#signals.push({ flow: parent, seq });
  }

  #logicFor(logicId: string, version: number | null): LogicVersion {
    let found: LogicVersion | undefined;
    for (const l of this.#logics) {
      if (l.logicId !== logicId || (version !== null && l.version !== version)) continue;
      if (found === undefined || l.version > found.version) found = l;
    }
    if (found === undefined) {
      throw new Error(`a children step spawns ${logicId}@${version ?? 'active'}, which the runner was not given: pass it in { logics }`);
    }
    return found;
  }

  /**
   * Runs the prepared attempt through the engine's own `executeAttempt` (definition lookup,
   * timeout, headers, error classification), with executors that answer from the fakes — and, for
   * func steps given a module runtime, the engine's func executor with host calls answered by
   * fakes on the virtual clock. What a fake throws (or a missing fake) is the test's own error: it
   * is thrown here, not turned into a step failure as the engine does with an executor's errors.
   */
  async #execute(flow: Flow): Promise<TraceEvent> {
    let thrown: { error: unknown } | null = null;
    const ask = async (key: string, running: Running, call: FakeCall): Promise<StepOutcome> => {
      try {
        return await this.#fake(key, running.step)(call);
      } catch (error) {
        thrown = { error };
        throw error;
      }
    };
    const byFake = async (def: EffectDef, a: Attempt): Promise<StepOutcome> =>
      ask(fakeKey(def, a.instance.domain), a.running, this.#call(a.running, a.input, a.running.idempotencyKey));
    const runtime = this.#opts.funcRuntime;
    const executors: Executors = {
      proxy: byFake,
      http: byFake,
      func:
        runtime === undefined
          ? byFake
          : funcExecutor(
              runtime,
              ({ target, n, importName, request, idempotencyKey, attempt }) =>
                ask(hostFakeKey(target, attempt.instance.domain), attempt.running, {
                  ...this.#call(attempt.running, request as JsonValue, idempotencyKey),
                  hostCall: { n, importName },
                }),
              () => this.now,
            ),
    };
    const result = await executeAttempt(flow.logic, flow.instance, executors, RUNNER_TOKENS);
    if (thrown !== null) throw (thrown as { error: unknown }).error;
    return result.status === 'progress' ? { type: 'progress', record: result.record } : { type: 'outcome', outcome: result };
  }

  #call(running: Running, input: JsonValue, idempotencyKey: string): FakeCall {
    return { step: running.step, kind: running.kind, input, attempt: running.attempt, idempotencyKey, seq: running.seq };
  }

  #fake(key: string, step: string): Fake {
    const fake = this.#fakes[key];
    if (fake === undefined) throw new Error(`no fake for ${key} (step ${step}); known: ${Object.keys(this.#fakes).join(', ')}`);
    return fake;
  }
}

/**
 * The store refuses every transition that is not a row of the contract's table (contracts/states.ts), so
 * the runner does too: a definition must not pass here and fail against Postgres. Worker events
 * (an attempt's result, a claimed child's start) apply to the claimed instance: pending → processing.
 * Creating an instance is an insert, not a transition.
 */
function refuseOutsideTable(before: Instance, event: TraceEvent, t: Transition): void {
  if (event.type === 'begin' && event.claimed !== true) return;
  const worker = event.type === 'outcome' || event.type === 'progress' || event.type === 'begin';
  const from: WorkflowState = worker && before.state === 'pending' ? 'processing' : before.state;
  if (!isAllowedTransition(from, t.cause, t.instance.state)) {
    throw new FlowError(
      'FLOW_TRANSITION_REFUSED',
      `workflow ${before.id}: ${from} --${t.cause}--> ${t.instance.state} is not in the transition table (contracts/states.ts); the store would refuse it`,
      { status: 500, details: { from, cause: t.cause, to: t.instance.state, event } },
    );
  }
}

/** What the store's count and load would give the parent: children of attempt `seq`, in item order. */
function childrenState(flow: Flow, seq: number): ChildrenState {
  return childrenStateOf(
    flow.children
      .filter((c) => c.instance.parentSeq === seq)
      .map((c) => ({ state: c.instance.state, output: c.instance.output, error: c.instance.error as JsonValue })),
  );
}

/** What the store writes of a transition's search attributes: set, or unset by null. */
function setAttributes(flow: Flow, writes: Transition['attributes']): void {
  for (const [name, w] of Object.entries(writes ?? {})) {
    if (w === null) flow.attributes.delete(name);
    else flow.attributes.set(name, w);
  }
}

function newInstance(logic: LogicVersion, input: JsonValue, opts: RunOptions): Instance {
  return createInstance(logic, { id: opts.id ?? randomUUID(), env: opts.env ?? 'test', input, correlationId: opts.correlationId ?? null });
}
