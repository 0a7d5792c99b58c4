import type { LogicVersion } from '../../contracts/index.ts';
import { evaluate } from '../core/expressions.ts';
import type { Instance } from '../core/instance.ts';
import { envVarName, handlerEnvName, type HandlerProfiles } from '../executors/handlers.ts';
import type { Db } from '../store/db.ts';
import { insertLimitAudit } from '../store/audit.ts';
import {
  type LimitOverride,
  limitLoads,
  listOverrides,
  type PermitNeed,
  putOverride,
  releasePermits,
  sweepPermits,
} from '../store/permits.ts';
import { asScheduler, inEnv } from '../store/tx.ts';
import { type Allotment, Allowances } from './allowances.ts';
import { effectOf } from './execute-attempt.ts';

/** A limit: calls in flight at once, and a token bucket (calls per second, up to `burst` at once). */
export interface Limit {
  concurrency: number | null;
  rate: number | null;
  burst: number | null;
}

/** A limit in force for an env's work, where it comes from, and its load now. */
export interface LimitState extends Limit {
  scope: string;
  resource: string;
  source: 'config' | 'declared' | 'override';
  updatedBy: string | null;
  updatedAt: Date | null;
  inFlight: number;
  waiting: number;
}

/** The scope of a limit that holds across every env. */
export const EVERY_ENV = '*';

/** How often each engine sweeps what crashed holders and operators' cancels left waiting. (Default: 1000) */
const SWEEP_MS = 1000;

const at = (scope: string, resource: string) => `${scope}\u0000${resource}`;

/** The resource of a handler's limit: `handler:<NAME>`, in scope `*` or one env's. */
export const handlerResource = (handler: string) => `handler:${handlerEnvName(handler)}`;
/** The resource of a per-key limit: `key:<logicId>:<step>`, or `key:<logicId>:*` for the workflow's. */
export const keyResource = (logicId: string, step: string | null) => `key:${logicId}:${step ?? '*'}`;

/**
 * Decides which permits an attempt needs and takes them (ARCHITECTURE.md, Invariants: calls within their limits).
 * What is limited is known here without asking the database: the handler profiles' limits, the
 * LogicVersion's per-key declarations, and the overrides set through the API (read at start and
 * again on every `flow_limits` notice). An attempt nothing limits costs no statement at all.
 */
export class Permits {
  readonly #config = new Map<string, Limit>();
  #overrides = new Map<string, LimitOverride>();
  #timer: NodeJS.Timeout | null = null;
  #unlisten: (() => Promise<void>)[] = [];
  /** Resources (scope, resource) someone queued on lately, by when: their releases look for waiters. */
  readonly #contended = new Map<string, number>();
  /** Room lent to this engine by limits far from reached: attempts it covers take no statement. */
  readonly #allowances: Allowances;
  #stopped = false;

  constructor(
    private readonly db: Db,
    handlers: HandlerProfiles,
    private readonly onError: (err: unknown) => void = () => {},
    /** How often the sweep runs (0: never; tests show wake-ups need no sweep). */
    private readonly sweepMs = SWEEP_MS,
    /** The slots a loan asks for: the most instances the worker pool holds at once, with their permits (twice its executors). */
    slots: number,
  ) {
    this.#allowances = new Allowances(db, slots, onError);
    for (const [name, p] of handlers) {
      if (p.limit !== undefined) this.#config.set(at(EVERY_ENV, `handler:${name}`), p.limit);
      // per-env limits are keyed by the env's variable spelling; resolved per call (below)
      for (const [envKey, limit] of p.envLimits ?? []) this.#config.set(at(`$${envKey}`, `handler:${name}`), limit);
    }
  }

  /** The limits from configuration, by scope (`*`, or `$<ENV>` as spelled in the variable) and resource. */
  configured(): { scope: string; resource: string; limit: Limit }[] {
    return [...this.#config].map(([k, limit]) => {
      const [scope, resource] = k.split('\u0000') as [string, string];
      return { scope, resource, limit };
    });
  }

  /** Reads the overrides and keeps them fresh; sweeps now and then. A companion of the worker pool. */
  async start(): Promise<void> {
    this.#stopped = false;
    await this.reload();
    const listen = (channel: string, fn: (payload: string) => void) =>
      this.db.listen(channel, fn).then((u) => this.#unlisten.push(u), () => {});
    await listen('flow_limits', () => void this.reload().catch(this.onError));
    await listen('flow_permit_waiting', (payload) => {
      const [scope, resource] = payload.split('\n') as [string, string];
      this.#contended.set(at(scope, resource), Date.now());
      // someone waits in line: loans of it stop jumping the line
      this.#allowances.revoke(scope, resource);
    });
    this.#allowances.start();
    if (this.#config.size > 0 || this.#overrides.size > 0) this.#armSweep();
  }

  /** The sweep runs once anything is limited here (configured, overridden, or declared by a definition this engine ran). */
  #armSweep(): void {
    if (this.sweepMs <= 0 || this.#timer !== null || this.#stopped) return;
    this.#timer = setInterval(() => void this.sweep().catch(this.onError), this.sweepMs);
    this.#timer.unref();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    await Promise.all(this.#unlisten.splice(0).map((u) => u()));
    await this.#allowances.stop();
  }

  /**
   * The room for one attempt with these needs from this engine's loans (migration 0053), with no
   * statement: then the attempt takes none of its permits in the database. Null where a loan does
   * not cover every need (a loan of a limit far from reached is asked for meanwhile).
   */
  allot(needs: readonly PermitNeed[]): Allotment | null {
    return this.#allowances.allot(needs);
  }

  /** Drops dead permits and wakes what they held back (crashed holders, cancelled instances). */
  sweep(): Promise<number> {
    return asScheduler(this.db, (c) => sweepPermits(c));
  }

  /** Reads the overrides again (a limit changed): no loan is handed out under the limits it was lent by. */
  async reload(): Promise<void> {
    this.#allowances.revoke();
    const rows = await asScheduler(this.db, (c) => listOverrides(c));
    this.#overrides = new Map(rows.map((o) => [at(o.scope, o.resource), o]));
    if (rows.length > 0) this.#armSweep();
  }

  /** The limit in force for a resource in a scope: its override, else what is given. */
  #limit(scope: string, resource: string, given: Limit | undefined): Limit | undefined {
    const o = this.#overrides.get(at(scope, resource));
    return o === undefined ? given : { concurrency: o.concurrency, rate: o.rate, burst: o.burst };
  }

  /**
   * The permits the instance's next piece of work needs: its workflow's per-key permit, and before
   * an attempt, the handler's (every env's and its env's) and the step's per-key permit. Empty, at no cost, when nothing limits it.
   */
  async needs(logic: LogicVersion, instance: Instance, work: 'begin' | 'attempt'): Promise<PermitNeed[]> {
    const needs: PermitNeed[] = [];
    const add = (scope: string, resource: string, key: string, limit: Limit | undefined, workflowWide = false) => {
      if (limit !== undefined && (limit.concurrency !== null || limit.rate !== null)) needs.push({ scope, resource, key, ...limit, workflowWide });
    };
    // the workflow's per-key permit: taken before its first attempt (or its begin, for a child
    // spawned unstarted), held until it ends; a later attempt finds it held (one statement)
    const c = logic.concurrency;
    if (c !== undefined) {
      const resource = keyResource(logic.logicId, null);
      add(instance.env, resource, await keyOf(c.key, instance), this.#limit(instance.env, resource, { concurrency: c.limit, rate: null, burst: null }), true);
    }
    if (needs.length > 0) this.#armSweep();
    if (work === 'begin') return needs;
    const running = instance.ctx.running;
    if (running === null) return needs;
    const def = effectOf(logic, running);
    if (def?.kind === 'proxy' && (this.#config.size > 0 || this.#overrides.size > 0)) {
      const resource = handlerResource(def.handler ?? logic.domain);
      add(EVERY_ENV, resource, '', this.#limit(EVERY_ENV, resource, this.#config.get(at(EVERY_ENV, resource))));
      add(instance.env, resource, '', this.#limit(instance.env, resource, this.#config.get(at(`$${envVarName(instance.env)}`, resource))));
    }
    const step = logic.steps[running.step];
    if (running.kind === 'step' && step !== undefined && 'concurrency' in step && step.concurrency !== undefined) {
      const resource = keyResource(logic.logicId, running.step);
      const declared = { concurrency: step.concurrency.limit, rate: null, burst: null };
      add(instance.env, resource, await keyOf(step.concurrency.key, instance), this.#limit(instance.env, resource, declared));
    }
    if (needs.length > 0) this.#armSweep();
    return needs;
  }

  /**
   * Sets the limit of a resource in a scope (an env, or `*`), replacing configuration, or with
   * `limit` null goes back to it; audited, and applied to the work waiting on it at once (migration
   * 0027, apply_limit_change): every engine re-reads the overrides on the notice it sends.
   */
  async set(args: { scope: string; resource: string; limit: Limit | null; actor: string; reason: string }): Promise<void> {
    await inEnv(this.db, args.scope, async (c) => {
      const before = await putOverride(c, { scope: args.scope, resource: args.resource, limit: args.limit, actor: args.actor });
      const configured = this.#configuredIn(args.scope, args.resource) ?? null;
      await insertLimitAudit(c, {
        env: args.scope,
        resource: args.resource,
        verb: args.limit === null ? 'limit.reset' : 'limit.set',
        actor: args.actor,
        reason: args.reason,
        args: {},
        before: before === null ? { source: 'config', limit: configured } : { source: 'override', limit: { concurrency: before.concurrency, rate: before.rate, burst: before.burst } },
        after: args.limit === null ? { source: 'config', limit: configured } : { source: 'override', limit: args.limit },
      });
    });
    await this.reload();
  }

  /** The limits in force for `env`'s work (its own and every env's) with their load: for the API and the console. */
  async list(env: string): Promise<LimitState[]> {
    const [overrides, loads] = await asScheduler(this.db, async (c) => [await listOverrides(c), await limitLoads(c, [EVERY_ENV, env])] as const);
    const out = new Map<string, LimitState>();
    const entry = (scope: string, resource: string, limit: Limit, source: LimitState['source'], by: LimitOverride | null = null) =>
      out.set(at(scope, resource), { scope, resource, ...limit, source, updatedBy: by?.updatedBy ?? null, updatedAt: by?.updatedAt ?? null, inFlight: 0, waiting: 0 });
    for (const { scope, resource, limit } of this.configured()) {
      if (scope === EVERY_ENV) entry(scope, resource, limit, 'config');
      else if (scope === `$${envVarName(env)}`) entry(env, resource, limit, 'config');
    }
    for (const o of overrides) if (o.scope === EVERY_ENV || o.scope === env) entry(o.scope, o.resource, o, 'override', o);
    for (const l of loads) {
      const k = at(l.scope, l.resource);
      if (!out.has(k)) entry(l.scope, l.resource, { concurrency: null, rate: null, burst: null }, 'declared');
      const e = out.get(k)!;
      e.inFlight += l.inFlight;
      e.waiting += l.waiting;
    }
    return [...out.values()];
  }

  #configuredIn(scope: string, resource: string): Limit | undefined {
    return this.#config.get(at(scope === EVERY_ENV ? EVERY_ENV : `$${envVarName(scope)}`, resource));
  }

  /**
   * Whether a release of these permits should look for waiters although none waited when they
   * were taken: someone queued on one of them since (a notice from acquire_permits(), kept a
   * minute). A notice that comes too late leaves the waiter to the next release or the sweep.
   */
  contended(needs: readonly PermitNeed[]): boolean {
    const since = Date.now() - 60_000;
    return needs.some((n) => (this.#contended.get(at(n.scope, n.resource)) ?? 0) > since);
  }

  /** After the commit that ended the attempt (or the instance): wakes who waits on what it held. */
  release(args: { id: string; ended: boolean }): Promise<number> {
    return releasePermits(this.db.pool, args);
  }
}

/**
 * A key as the permit tables hold it: a string as is, anything else as its JSON. A key that
 * cannot be evaluated is `$error`: those instances share one key rather than run unlimited.
 */
async function keyOf(expr: string, instance: Instance): Promise<string> {
  let value: unknown;
  try {
    value = await evaluate('concurrency.key', expr, instance);
  } catch {
    return '$error';
  }
  return typeof value === 'string' ? value : JSON.stringify(value);
}
