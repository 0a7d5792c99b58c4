import { type GrantRefusal, grantInForce, grantRefusals } from '../../contracts/grants.ts';
import type { LogicVersion } from '../../contracts/index.ts';
import type { EffectKind, Executor, Executors } from '../executors/index.ts';
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
  readonly #known = new Map<string, { refusals: readonly GrantRefusal[]; until: number }>();
  constructor(
    private readonly db: Db,
    private readonly handlers: HandlerProfiles,
  ) {}

  async refusals(env: string, logic: LogicVersion): Promise<readonly GrantRefusal[]> {
    const key = `${env}\u0000${logic.hash}`;
    const hit = this.#known.get(key);
    if (hit !== undefined && hit.until > Date.now()) return hit.refusals;
    const found = await inEnv(this.db, env, (c) => findVouches(c, logic.hash));
    const refusals = grantRefusals(logic, grantInForce(logic.logicId, found?.vouched ?? []), servesIn(this.handlers, env));
    this.#known.set(key, { refusals, until: Date.now() + REFRESH_MS });
    return refusals;
  }

  /** This process published or re-vouched for the version: read its grant again on next use. */
  forget(env: string, hash: string): void {
    this.#known.delete(`${env}\u0000${hash}`);
  }

  /**
   * The executors behind the gate: an attempt whose handler (its proxy call, its compensation, or
   * a host function its module imports) is refused to the version fails permanently with
   * FLOW_GRANT_HANDLER, before anything runs or is called.
   */
  wrap(executors: Executors): Executors {
    const gated = <K extends EffectKind>(inner: Executor<K>): Executor<K> => {
      const run: Executor<K> = async (def, a) => {
        const part = a.running.kind === 'step' ? 'step' : 'compensate';
        const refusals = await this.refusals(a.instance.env, a.logic);
        const refused = refusals.find(
          (r) => r.code === 'FLOW_GRANT_HANDLER' && r.step === a.running.step && (r.part === part || r.part?.startsWith('import:') === true),
        );
        if (refused !== undefined) return { status: 'failed', retryable: false, error: { code: refused.code, message: `${refused.message} (missing: ${refused.missing})` } };
        return inner(def, a);
      };
      if (inner.ahead !== undefined) run.ahead = inner.ahead;
      return run;
    };
    return { proxy: gated(executors.proxy), http: gated(executors.http), func: gated(executors.func) };
  }
}
