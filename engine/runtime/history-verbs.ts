import type { WorkflowRecord } from '../../contracts/index.ts';
import { isTombstone, tombstone } from '../../contracts/erasure.ts';
import { TERMINAL_STATES } from '../../contracts/states.ts';
import type { FlowScope } from '../../contracts/scopes.ts';
import type { Instance } from '../core/instance.ts';
import { EraseNotEnded, InstanceHeld } from '../errors.ts';
import { insertAudit } from '../store/audit.ts';
import type { Db } from '../store/db.ts';
import { eraseInstance } from '../store/erase.ts';
import { NotFound } from '../store/errors.ts';
import { findHold, placeHold, releaseHold } from '../store/legal-holds.ts';
import { loadWorkflow } from '../store/load-workflow.ts';
import type { Client } from '../store/tx.ts';
import { inEnv } from '../store/tx.ts';
import { type FlowLogger, instanceFields, silentLogger } from './log.ts';
import { type Actor, authorize, type VerbOptions } from './operations.ts';

/**
 * The verbs about an instance's history rather than its run: legal hold (exempts it from
 * retention), its release, and erasure (tombstones its data). Each is audited in the transaction
 * that acts, and needs its scope for the instance's definition: `flow:admin` for holds — a
 * hold outlives every operator verb and only an administrator decides what the law keeps —
 * and `flow:erase` for erasure.
 */
export class HistoryVerbs {
  constructor(
    private readonly db: Db,
    private readonly defaultEnv: string,
    private readonly record: (id: string, env: string) => Promise<WorkflowRecord>,
    private readonly log: FlowLogger = silentLogger,
  ) {}

  /** Exempts the instance from retention until released; a second hold changes nothing and is not audited. */
  hold(id: string, o: VerbOptions & { reason: string }) {
    return this.#act(id, o, 'flow:admin', 'legal_hold', async (c, inst, env) => {
      const placed = await placeHold(c, env, inst.id, o.actor.subject, o.reason);
      return placed ? [{ held: false }, { held: true }] : null;
    });
  }

  releaseHold(id: string, o: VerbOptions & { reason: string }) {
    return this.#act(id, o, 'flow:admin', 'legal_hold_release', async (c, inst) => ((await releaseHold(c, inst.id)) ? [{ held: true }, { held: false }] : null));
  }

  /** Tombstones an ended instance's data (store/erase.ts). Refused while it runs or is held. */
  erase(id: string, o: VerbOptions & { reason: string }) {
    return this.#act(id, o, 'flow:erase', 'erase', async (c, inst) => {
      if (!TERMINAL_STATES.has(inst.state)) throw new EraseNotEnded(inst.id, inst.state);
      if ((await findHold(c, inst.id)) !== null) throw new InstanceHeld(inst.id);
      await eraseInstance(c, inst.id, tombstone(new Date()));
      return [{ state: inst.state, erased: isTombstone(inst.input) }, { state: inst.state, erased: true }];
    });
  }

  async #act(
    id: string,
    o: VerbOptions & { reason: string },
    scope: FlowScope,
    verb: string,
    act: (c: Client, inst: Instance, env: string) => Promise<[unknown, unknown] | null>,
  ): Promise<WorkflowRecord> {
    const env = o.env ?? this.defaultEnv;
    await inEnv(this.db, env, async (c) => {
      const stored = await loadWorkflow(c, id, { forUpdate: true });
      if (stored === null) throw new NotFound(`workflow ${id}`);
      authorize(o.actor as Actor, scope, stored.instance);
      const change = await act(c, stored.instance, env);
      if (change === null) return;
      await insertAudit(c, { workflowId: id, env, verb, actor: o.actor.subject, reason: o.reason, args: {}, before: change[0], after: change[1] });
      this.log.info({ ...instanceFields(stored.instance), verb, actor: o.actor.subject, reason: o.reason }, `operator ${verb}`);
    });
    return this.record(id, env);
  }
}
