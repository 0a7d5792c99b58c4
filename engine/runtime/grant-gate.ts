import { type GrantRefusal, grantInForce, grantRefusals } from '../../contracts/grants.ts';
import type { LogicVersion } from '../../contracts/index.ts';
import type { Attempt, EffectKind, Executor, Executors } from '../executors/index.ts';
import { type HandlerProfiles, servesIn } from '../executors/handlers.ts';
import type { Db } from '../store/db.ts';
import { findVouches } from '../store/logic-versions.ts';
import { inEnv } from '../store/tx.ts';

/** How long a version's refusals are trusted before the grant is read again: a re-vouch on another node shows within it. */
const REFRESH_MS = 60_000;

/**
 * The grant rule at execution (ARCHITECTURE.md, Invariants: a version can do no more than its
 * publisher): each version's refusals, computed once per env from the grant recorded with it and
 * the handler profiles, and kept. A step pays a map lookup; the grant is read from the store
 * once per version and env, then at most once a minute.
 */
export class GrantGate {
  /** env → hash → refusals (nested: no key string built per step). */
  readonly #known = new Map<string, Map<string, { refusals: readonly GrantRefusal[]; until: number }>>();
  constructor(
    private readonly db: Db,
    private readonly handlers: HandlerProfiles,
  ) {}

  /** The version's refusals in `env` when known and fresh: the step's path, without an await. */
  known(env: string, logic: LogicVersion): readonly GrantRefusal[] | undefined {
    const hit = this.#known.get(env)?.get(logic.hash);
    return hit !== undefined && hit.until > Date.now() ? hit.refusals : undefined;
  }

  async refusals(env: string, logic: LogicVersion): Promise<readonly GrantRefusal[]> {
    const hit = this.known(env, logic);
    if (hit !== undefined) return hit;
    const found = await inEnv(this.db, env, (c) => findVouches(c, logic.hash));
    const refusals = grantRefusals(logic, grantInForce(logic.logicId, found?.vouched ?? []), servesIn(this.handlers, env));
    const inEnvKnown = this.#known.get(env) ?? new Map();
    inEnvKnown.set(logic.hash, { refusals, until: Date.now() + REFRESH_MS });
    this.#known.set(env, inEnvKnown);
    return refusals;
  }

  /** This process published or re-vouched for the version: read its grant again on next use. */
  forget(env: string, hash: string): void {
    this.#known.get(env)?.delete(hash);
  }

  /**
   * The executors behind the gate: an attempt whose handler (its proxy call, its compensation, or
   * a host function its module imports) is refused to the version fails permanently with
   * FLOW_GRANT_HANDLER, before anything runs or is called.
   */
  wrap(executors: Executors): Executors {
    const gated = <K extends EffectKind>(inner: Executor<K>): Executor<K> => {
      const checked: Executor<K> = (def, a) => {
        const refusals = this.known(a.instance.env, a.logic);
        // the common case, a known version refused nothing: straight through, no await added
        if (refusals !== undefined && refusals.length === 0) return inner(def, a);
        return (refusals !== undefined ? Promise.resolve(refusals) : this.refusals(a.instance.env, a.logic)).then((known) => {
          const refused = refusalOf(known, a.running);
          return refused === undefined
            ? inner(def, a)
            : { status: 'failed', retryable: false, error: { code: refused.code, message: `${refused.message} (missing: ${refused.missing})` } };
        });
      };
      if (inner.ahead !== undefined) checked.ahead = inner.ahead;
      return checked;
    };
    return { proxy: gated(executors.proxy), http: gated(executors.http), func: gated(executors.func) };
  }
}

/** The handler refusal that applies to the attempt: its step's own call or compensation, or any host function of its module. */
function refusalOf(refusals: readonly GrantRefusal[], running: Attempt['running']): GrantRefusal | undefined {
  const part = running.kind === 'step' ? 'step' : 'compensate';
  return refusals.find((r) => r.code === 'FLOW_GRANT_HANDLER' && r.step === running.step && (r.part === part || r.part?.startsWith('import:') === true));
}
