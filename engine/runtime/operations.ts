import { type FlowScope, grants } from '../../contracts/scopes.ts';
import type { LogicVersion, WorkflowRecord } from '../../contracts/index.ts';
import type { Instance } from '../core/instance.ts';
import { type Preview, previewRewind, simulate } from '../core/preview.ts';
import type { VerbEvent } from '../core/journal.ts';
import { type CancelArgs, cancel, decisionsSettledBy, type ForceCompleteArgs, forceComplete, type RewindArgs, retry } from '../core/verbs.ts';
import { refuseUnlessApprover } from '../core/wake.ts';
import { InstanceErased, ScopeMissing } from '../errors.ts';
import { isTombstone } from '../../contracts/erasure.ts';
import { type AuditRow, listAudit } from '../store/audit.ts';
import type { Db } from '../store/db.ts';
import { NotFound } from '../store/errors.ts';
import { type ListedInstance, listDeadLettered, listStuck } from '../store/list-instances.ts';
import { type PagePosition, type WorkflowFilter, type WorkflowListItem, listWorkflows } from '../store/list-workflows.ts';
import { loadWorkflow } from '../store/load-workflow.ts';
import { type SelectedWorkflow, selectWorkflows } from '../store/select-workflows.ts';
import { inEnv } from '../store/tx.ts';
import { STUCK_DEFAULTS, type StuckThresholds } from '../store/workflow-filter.ts';
import type { LogicCache } from './logic-cache.ts';
import { type FlowLogger, instanceFields, silentLogger } from './log.ts';
import { Migrations } from './migrations.ts';
import { mutateWorkflow } from './mutate.ts';
import type { TransitionObserver } from './observer.ts';

/** Who is acting, as the caller's authentication established it (the token's `sub` and `scope`). */
export interface Actor {
  subject: string;
  scopes: readonly string[];
}

/** `repair`'s arguments as callers give them (the API body, the CLI flags). */
export interface RepairArgs {
  rewindTo: string;
  input?: unknown;
  /** Run the rewound steps' registered compensations first, last first, then re-run. (Default: false) */
  compensateRewound?: boolean;
}

export interface VerbOptions {
  actor: Actor;
  reason?: string;
  env?: string;
}

/** The scope each audited verb needs (ARCHITECTURE.md, Contracts: HTTP API), narrowable to definitions by a logicId glob. */
const VERB_SCOPES = {
  retry: 'flow:retry',
  repair: 'flow:repair',
  replay_from: 'flow:replay',
  cancel: 'flow:cancel',
  force_complete: 'flow:force-complete',
} as const satisfies Record<string, FlowScope>;

/**
 * Refuses unless `actor` holds `scope` for the instance's definition. Called after the instance
 * was read in the caller's env, so an id from another env is a 404 before any scope question.
 */
export function authorize(actor: Actor, scope: FlowScope, inst: Pick<Instance, 'logicId' | 'id'>): void {
  if (!grants(actor.scopes, scope, inst.logicId)) throw new ScopeMissing(actor.subject, scope, `workflow ${inst.id} (${inst.logicId})`);
}

/**
 * Refuses unless `actor` may apply `event` to the instance: the verb's scope, and where the verb
 * would settle a decision instead of an approver (force-complete on it, a rewind to it or past
 * it), the scopes an approver needs to answer it. One check for every path: a verb, its dry run,
 * a bulk job.
 */
function authorizeVerb(actor: Actor, event: VerbEvent, logic: LogicVersion, inst: Instance): void {
  authorize(actor, VERB_SCOPES[event.verb], inst);
  // an erased instance has tombstones where its input and outputs were: nothing to run on
  if (isTombstone(inst.input)) throw new InstanceErased(inst.id, event.verb);
  if (event.verb !== 'force_complete' && event.verb !== 'repair' && event.verb !== 'replay_from') return;
  for (const step of decisionsSettledBy(logic, inst, event.verb, event.args.step)) {
    if (!grants(actor.scopes, 'flow:decide', inst.logicId)) {
      throw new ScopeMissing(actor.subject, 'flow:decide', `${event.verb} of workflow ${inst.id} (${inst.logicId}), which settles its decision ${step}`);
    }
    refuseUnlessApprover(actor, step, logic.steps[step] as { approverScope?: string });
  }
}

/**
 * The audited, scope-gated operator verbs and listings (ARCHITECTURE.md, Invariants: one writer
 * per instance). Each verb runs in one transaction with its audit row; a refusal changes nothing
 * and writes no audit row. Every verb has a dry run that changes nothing and answers what would
 * run, under which keys.
 */
export class Operations {
  constructor(
    private readonly db: Db,
    private readonly logics: LogicCache,
    private readonly defaultEnv: string,
    private readonly afterChange: (id: string, env: string) => Promise<WorkflowRecord>,
    o: { stuck?: Partial<StuckThresholds>; observer?: TransitionObserver; log?: FlowLogger } = {},
  ) {
    this.stuck = { ...STUCK_DEFAULTS, ...o.stuck };
    this.#observer = o.observer;
    this.#log = o.log ?? silentLogger;
    this.migrations = new Migrations(db, defaultEnv, this.stuck, afterChange, this.#log);
  }

  /** The migrate verb: its dry run, and the move of one instance that its bulk job applies to each. */
  readonly migrations: Migrations;

  readonly #observer: TransitionObserver | undefined;
  readonly #log: FlowLogger;

  /** When an instance counts as stuck, unless a call says otherwise (EngineOptions.stuck). */
  readonly stuck: StuckThresholds;

  retry(id: string, o: VerbOptions) {
    return this.#verb(id, {}, o, { type: 'verb', verb: 'retry' });
  }

  repair(id: string, args: RepairArgs, o: VerbOptions) {
    return this.#verb(id, args, o, { type: 'verb', verb: 'repair', args: rewindArgs(args) });
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
  previewRepair(id: string, args: RepairArgs, o: VerbOptions): Promise<Preview> {
    return this.#preview(id, { type: 'verb', verb: 'repair', args: rewindArgs(args) }, o, (logic, inst) => previewRewind(logic, inst, 'verb.repair', rewindArgs(args)));
  }

  previewReplayFrom(id: string, args: { step: string }, o: VerbOptions): Promise<Preview> {
    return this.#preview(id, { type: 'verb', verb: 'replay_from', args: { step: args.step } }, o, (logic, inst) => previewRewind(logic, inst, 'verb.replay_from', { step: args.step }));
  }

  /** Dry run of retry: the step (or compensation) that would run again, under the same generation's keys. */
  previewRetry(id: string, o: VerbOptions): Promise<Preview> {
    return this.#preview(id, { type: 'verb', verb: 'retry' }, o, async (logic, inst) => simulate(logic, inst, await retry(logic, inst)));
  }

  /** Dry run of cancel: with `compensate`, the compensations that would run, last registered first. */
  previewCancel(id: string, args: CancelArgs, o: VerbOptions): Promise<Preview> {
    return this.#preview(id, { type: 'verb', verb: 'cancel', args }, o, async (logic, inst) => simulate(logic, inst, await cancel(logic, inst, args)));
  }

  /** Dry run of force-complete: the steps that would run after the forced output. */
  previewForceComplete(id: string, args: ForceCompleteArgs, o: VerbOptions): Promise<Preview> {
    return this.#preview(id, { type: 'verb', verb: 'force_complete', args }, o, async (logic, inst) => simulate(logic, inst, await forceComplete(logic, inst, args)));
  }

  listDeadLettered(o: { env?: string; limit?: number } = {}): Promise<ListedInstance[]> {
    return inEnv(this.db, o.env ?? this.defaultEnv, (c) => listDeadLettered(c, o.limit));
  }

  /** Instances that should be moving and are not, each with its reason (`STUCK_REASONS`). */
  listStuck(o: { env?: string; pendingForMs?: number; parkedForMs?: number; limit?: number } = {}): Promise<ListedInstance[]> {
    const { env, ...args } = o;
    return inEnv(this.db, env ?? this.defaultEnv, (c) => listStuck(c, { ...this.stuck, ...args }));
  }

  /** One page of the env's instances, newest first; pass the last item's `position` as `after` for the next. */
  list(filter: WorkflowFilter, o: { env?: string; limit?: number; after?: PagePosition | null } = {}): Promise<WorkflowListItem[]> {
    return inEnv(this.db, o.env ?? this.defaultEnv, (c) => listWorkflows(c, { ...this.stuck, ...filter }, o.limit ?? 50, o.after ?? null));
  }

  /** The instances a filter covers, oldest first: what a bulk job acts on. */
  async select(filter: WorkflowFilter, o: { env?: string; limit?: number } = {}): Promise<SelectedWorkflow[]> {
    return (await inEnv(this.db, o.env ?? this.defaultEnv, (c) => selectWorkflows(c, { ...this.stuck, ...filter }, o.limit ?? 100))).rows;
  }

  audit(id: string, o: { env?: string } = {}): Promise<AuditRow[]> {
    return inEnv(this.db, o.env ?? this.defaultEnv, (c) => listAudit(c, id));
  }

  /** `args` as the caller gave them go to the audit row; the event carries them as the core takes them. */
  async #verb(id: string, args: unknown, o: VerbOptions, event: VerbEvent): Promise<WorkflowRecord> {
    const { verb } = event;
    const env = o.env ?? this.defaultEnv;
    const audit = { verb, actor: o.actor.subject, reason: o.reason ?? null, args };
    const t = await mutateWorkflow(this.db, this.logics, env, id, event, {
      audit,
      allow: (inst, logic) => authorizeVerb(o.actor, event, logic, inst),
      ...(this.#observer === undefined ? {} : { observer: this.#observer }),
    });
    this.#log.info({ ...instanceFields(t.instance), verb, actor: o.actor.subject, reason: o.reason ?? null }, `operator ${verb}`);
    return this.afterChange(id, env);
  }

  async #preview(id: string, event: VerbEvent, o: VerbOptions, run: (logic: LogicVersion, inst: Instance) => Promise<Preview>): Promise<Preview> {
    return inEnv(this.db, o.env ?? this.defaultEnv, async (c) => {
      const stored = await loadWorkflow(c, id);
      if (stored === null) throw new NotFound(`workflow ${id}`);
      const logic = await this.logics.get(stored.instance.env, stored.instance.logicHash, c);
      authorizeVerb(o.actor, event, logic, stored.instance);
      return run(logic, stored.instance);
    });
  }
}

function rewindArgs(args: RepairArgs): RewindArgs {
  return {
    step: args.rewindTo,
    ...(args.input === undefined ? {} : { input: args.input as never }),
    ...(args.compensateRewound === true ? { compensateRewound: true } : {}),
  };
}
