import { FlowError, type WorkflowRecord } from '../../contracts/index.ts';
import type { Instance } from '../core/instance.ts';
import { type Preview, previewRewind } from '../core/preview.ts';
import type { VerbEvent } from '../core/journal.ts';
import type { CancelArgs, ForceCompleteArgs, RewindArgs } from '../core/verbs.ts';
import type { LogicVersion } from '../../contracts/index.ts';
import { type AuditRow, listAudit } from '../store/audit.ts';
import type { Db } from '../store/db.ts';
import { NotFound } from '../store/errors.ts';
import { type ListedInstance, listDeadLettered, listStuck } from '../store/list-instances.ts';
import { loadWorkflow } from '../store/load-workflow.ts';
import { inEnv } from '../store/tx.ts';
import type { LogicCache } from './logic-cache.ts';
import { mutateWorkflow } from './mutate.ts';

/** Who is acting, as the caller's authentication established it. */
export interface Actor {
  subject: string;
  scopes: readonly string[];
}

/** The scope every operator verb requires. */
export const OPERATOR_SCOPE = 'flow:operate';

export interface VerbOptions {
  actor: Actor;
  reason?: string;
  env?: string;
}

/**
 * The audited, scope-gated operator verbs and listings (DESIGN.md §5). Each verb runs in one
 * transaction with its audit row; a refusal changes nothing and writes no audit row.
 */
export class Operations {
  constructor(
    private readonly db: Db,
    private readonly logics: LogicCache,
    private readonly defaultEnv: string,
    private readonly afterChange: (id: string, env: string) => Promise<WorkflowRecord>,
  ) {}

  retry(id: string, o: VerbOptions) {
    return this.#verb(id, {}, o, { type: 'verb', verb: 'retry' });
  }

  repair(id: string, args: { rewindTo: string; input?: unknown }, o: VerbOptions) {
    const a: RewindArgs = { step: args.rewindTo, ...(args.input === undefined ? {} : { input: args.input as never }) };
    return this.#verb(id, args, o, { type: 'verb', verb: 'repair', args: a });
  }

  replayFrom(id: string, args: { step: string }, o: VerbOptions) {
    return this.#verb(id, args, o, { type: 'verb', verb: 'replay_from', args: { step: args.step } });
  }

  cancel(id: string, args: CancelArgs, o: VerbOptions) {
    return this.#verb(id, args, o, { type: 'verb', verb: 'cancel', args });
  }

  forceComplete(id: string, args: ForceCompleteArgs, o: VerbOptions) {
    return this.#verb(id, args, o, { type: 'verb', verb: 'force_complete', args });
  }

  /** Dry run of repair: what would run again, which steps call out, which compensations register. */
  previewRepair(id: string, args: { rewindTo: string; input?: unknown }, o: VerbOptions): Promise<Preview> {
    const a: RewindArgs = { step: args.rewindTo, ...(args.input === undefined ? {} : { input: args.input as never }) };
    return this.#preview(id, o, (logic, inst) => previewRewind(logic, inst, 'verb.repair', a));
  }

  previewReplayFrom(id: string, args: { step: string }, o: VerbOptions): Promise<Preview> {
    return this.#preview(id, o, (logic, inst) => previewRewind(logic, inst, 'verb.replay_from', { step: args.step }));
  }

  listDeadLettered(o: { env?: string; limit?: number } = {}): Promise<ListedInstance[]> {
    return inEnv(this.db, o.env ?? this.defaultEnv, (c) => listDeadLettered(c, o.limit));
  }

  listStuck(o: { env?: string; pendingForMs?: number; limit?: number } = {}): Promise<ListedInstance[]> {
    const args = { pendingForMs: o.pendingForMs ?? 60_000, ...(o.limit === undefined ? {} : { limit: o.limit }) };
    return inEnv(this.db, o.env ?? this.defaultEnv, (c) => listStuck(c, args));
  }

  audit(id: string, o: { env?: string } = {}): Promise<AuditRow[]> {
    return inEnv(this.db, o.env ?? this.defaultEnv, (c) => listAudit(c, id));
  }

  /** `args` as the caller gave them go to the audit row; the event carries them as the core takes them. */
  async #verb(id: string, args: unknown, o: VerbOptions, event: VerbEvent): Promise<WorkflowRecord> {
    const verb = event.verb;
    authorize(o.actor, verb);
    const env = o.env ?? this.defaultEnv;
    await mutateWorkflow(this.db, this.logics, env, id, event, { verb, actor: o.actor.subject, reason: o.reason ?? null, args });
    return this.afterChange(id, env);
  }

  async #preview(id: string, o: VerbOptions, run: (logic: LogicVersion, inst: Instance) => Promise<Preview>): Promise<Preview> {
    authorize(o.actor, 'preview');
    return inEnv(this.db, o.env ?? this.defaultEnv, async (c) => {
      const stored = await loadWorkflow(c, id);
      if (stored === null) throw new NotFound(`workflow ${id}`);
      return run(await this.logics.get(stored.instance.env, stored.instance.logicHash, c), stored.instance);
    });
  }
}

function authorize(actor: Actor, verb: string): void {
  if (!actor.scopes.includes(OPERATOR_SCOPE)) {
    throw new FlowError('FLOW_FORBIDDEN', `${actor.subject} needs scope ${OPERATOR_SCOPE} to ${verb}`, { status: 403 });
  }
}
