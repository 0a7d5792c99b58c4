import type { MigrateRequest, MigrationGroup, MigrationPlan, MigrationPreview } from '../../contracts/api/migrations.ts';
import type { LogicVersion, WorkflowRecord } from '../../contracts/index.ts';
import { grants } from '../../contracts/scopes.ts';
import type { Instance } from '../core/instance.ts';
import type { MigrateEvent } from '../core/journal.ts';
import { type MigrationPlan as CorePlan, memberPlan, migrate, migrationPlan, renameProblems, type StepRenames } from '../core/migrate.ts';
import { MigrateBadRename, MigrateBadSelection, MigrateBadTarget, MigrateTargetRetired, ScopeMissing } from '../errors.ts';
import { insertAudit } from '../store/audit.ts';
import type { Db } from '../store/db.ts';
import { ConcurrentUpdate, NotFound } from '../store/errors.ts';
import { loadWorkflow } from '../store/load-workflow.ts';
import { findLogicVersion, isVersionActive } from '../store/logic-versions.ts';
import { migrateWorkflow } from '../store/migrate-workflow.ts';
import { migrationFacts } from '../store/migration-facts.ts';
import { selectWorkflows } from '../store/select-workflows.ts';
import { type Selection, shapeGroups, shapeKey, shapePage } from '../store/shape-groups.ts';
import { type Client, inEnv } from '../store/tx.ts';
import type { StuckThresholds, WorkflowFilter } from '../store/workflow-filter.ts';
import { type FlowLogger, instanceFields } from './log.ts';
import { summary } from './mutate.ts';
import type { Actor, VerbOptions } from './operations.ts';

const DEFAULT_LIMIT = 1000;
const DEFAULT_PAGE = 100;

/** One migration's versions and rename map, as a job keeps them in its `args`. */
export interface MigrateArgs {
  logicId: string;
  fromVersion: number;
  toVersion: number;
  renames: StepRenames;
  /** Move to a retired target too. (Default: false, FLOW_MIGRATE_TARGET_RETIRED) */
  allowRetired?: boolean;
}

/**
 * The migrate verb (docs/versions.md, "Migrating instances"): its dry run over a selection, and
 * the move of one instance, which a bulk job (runtime/bulk-jobs.ts) applies to each instance it
 * selected. Whether an instance may move is decided by the core (core/migrate.ts) — at the dry
 * run, and again under the row lock when it moves, since it may have moved on in between.
 */
export class Migrations {
  constructor(
    private readonly db: Db,
    private readonly defaultEnv: string,
    private readonly stuck: StuckThresholds,
    private readonly afterChange: (id: string, env: string) => Promise<WorkflowRecord>,
    private readonly log: FlowLogger,
  ) {}

  /**
   * The dry run, bounded by the shapes of the selection rather than its size: the selection is
   * grouped by shape in the database (store/shape-groups.ts), one representative of each group is
   * planned by the core, and one page of instances (`after`, `pageSize`) is listed, each plan read
   * off its group's under its own keys (core/migrate.ts, `memberPlan`). One read-only snapshot,
   * so the groups, the representatives and the page agree. Nothing is written.
   */
  async preview(req: MigrateRequest, actor: Actor, o: { env?: string } = {}): Promise<MigrationPreview> {
    const args = argsOf(req);
    return inEnv(
      this.db,
      o.env ?? this.defaultEnv,
      async (c) => {
        const { from, to } = await versionsOf(c, args, actor);
        const selection = this.#selection(req);
        const groups: MigrationGroup[] = [];
        const plans = new Map<string, CorePlan>();
        for (const g of await shapeGroups(c, selection)) {
          const rep = await loadWorkflow(c, g.representative);
          if (rep === null) throw new Error(`the representative ${g.representative} of a shape group is gone within one snapshot`);
          const plan = await migrationPlan(from, to, rep.instance, args.renames, { held: g.held, messages: g.messages });
          plans.set(shapeKey(g), plan);
          const { logicHash: _hash, ...shape } = g;
          const { refusal, lands, next } = wire(plan);
          groups.push({ ...shape, refusal, lands, next });
        }
        const page = await shapePage(c, selection, req.after ?? null, req.pageSize ?? DEFAULT_PAGE);
        if (page === null) throw new MigrateBadSelection(`after names ${req.after}, which is not an instance of this selection: pass the nextAfter of the previous page`);
        const items = page.members.map((m) => wire(memberPlan(plans.get(shapeKey(m))!, m, args.renames)));
        const selected = groups.reduce((n, g) => n + g.count, 0);
        const moves = groups.filter((g) => g.refusal === null).reduce((n, g) => n + g.count, 0);
        return {
          dryRun: true as const,
          logicId: args.logicId,
          from: { version: from.version, hash: from.hash },
          to: { version: to.version, hash: to.hash },
          renames: { ...args.renames },
          selected,
          moves,
          refused: selected - moves,
          groups,
          items,
          nextAfter: page.nextAfter,
        };
      },
      { snapshot: true },
    );
  }

  /** The instances a migration acts on, oldest first, after checking its versions and rename map: what its job is made of. */
  async select(req: MigrateRequest, actor: Actor, o: { env?: string } = {}): Promise<{ args: MigrateArgs; ids: string[] }> {
    const args = argsOf(req);
    return inEnv(this.db, o.env ?? this.defaultEnv, async (c) => {
      await versionsOf(c, args, actor);
      return { args, ids: await this.#select(c, req) };
    });
  }

  /**
   * Moves one instance, under its row lock, in one transaction with its journal and audit rows;
   * refused (MigrateRefused, 409, nothing written) when the core refuses it as it is now.
   */
  async apply(id: string, args: MigrateArgs, o: VerbOptions): Promise<WorkflowRecord> {
    const env = o.env ?? this.defaultEnv;
    const moved = await inEnv(this.db, env, async (c) => {
      const stored = await loadWorkflow(c, id, { forUpdate: true });
      if (stored === null) throw new NotFound(`workflow ${id}`);
      // read first: an instance of another env is a 404 before any scope question
      const { from, to } = await versionsOf(c, args, o.actor);
      const event: MigrateEvent = {
        type: 'migrate',
        from: { version: from.version, hash: from.hash },
        to: { version: to.version, hash: to.hash },
        renames: { ...args.renames },
      };
      const t = migrate(from, to, stored.instance, args.renames, await migrationFacts(c, id));
      if (!(await migrateWorkflow(c, stored, t, event))) throw new ConcurrentUpdate(id);
      await insertAudit(c, {
        workflowId: id,
        env,
        verb: 'migrate',
        actor: o.actor.subject,
        reason: o.reason ?? null,
        args: { fromVersion: from.version, toVersion: to.version, renames: args.renames },
        before: audited(stored.instance),
        after: audited(t.instance),
      });
      return t.instance;
    });
    this.log.info({ ...instanceFields(moved), verb: 'migrate', actor: o.actor.subject, reason: o.reason ?? null, toVersion: args.toVersion }, 'operator migrate');
    return this.afterChange(id, env);
  }

  /** The selection as the job makes it (`#select`), for the dry run to group and page in the database. */
  #selection(req: MigrateRequest): Selection {
    if (req.ids !== undefined) return { ids: [...new Set(req.ids)].slice(0, req.limit ?? DEFAULT_LIMIT) };
    return { filter: this.#filter(req), limit: req.limit ?? DEFAULT_LIMIT };
  }

  #filter(req: MigrateRequest): WorkflowFilter {
    return { ...this.stuck, ...req.filter, logicId: req.logicId, version: req.fromVersion, ...(req.filter?.state === undefined ? { live: true } : {}) };
  }

  async #select(c: Client, req: MigrateRequest): Promise<string[]> {
    if (req.ids !== undefined) return [...new Set(req.ids)].slice(0, req.limit ?? DEFAULT_LIMIT);
    return (await selectWorkflows(c, this.#filter(req), req.limit ?? DEFAULT_LIMIT)).rows.map((r) => r.id);
  }
}

function argsOf(req: MigrateRequest): MigrateArgs {
  if (req.ids !== undefined && req.filter !== undefined) throw new MigrateBadSelection('a migration selects instances by `ids` or by `filter`, not both');
  if (req.dryRun !== true && (req.after !== undefined || req.pageSize !== undefined)) {
    throw new MigrateBadSelection('`after` and `pageSize` page a dry run; a migration job takes every instance selected');
  }
  const f = req.filter;
  if (f?.logicId !== undefined && f.logicId !== req.logicId) throw new MigrateBadSelection(`the filter names ${f.logicId}, the migration ${req.logicId}`);
  if (f?.version !== undefined && f.version !== req.fromVersion) throw new MigrateBadSelection(`the filter names version ${f.version}, the migration moves version ${req.fromVersion}`);
  return {
    logicId: req.logicId,
    fromVersion: req.fromVersion,
    toVersion: req.toVersion,
    renames: req.renames ?? {},
    ...(req.allowRetired === true ? { allowRetired: true } : {}),
  };
}

/**
 * Both versions, after the checks every path makes: `flow:migrate` on the source and on the
 * target definition, a later target of the same definition, and a rename map that fits them.
 */
async function versionsOf(c: Client, args: MigrateArgs, actor: Actor): Promise<{ from: LogicVersion; to: LogicVersion }> {
  const from = await findLogicVersion(c, args.logicId, args.fromVersion);
  if (from === null) throw new NotFound(`LogicVersion ${args.logicId}@${args.fromVersion}`);
  const to = await findLogicVersion(c, args.logicId, args.toVersion);
  if (to === null) throw new NotFound(`LogicVersion ${args.logicId}@${args.toVersion}`);
  for (const doc of [from, to]) {
    if (!grants(actor.scopes, 'flow:migrate', doc.logicId)) throw new ScopeMissing(actor.subject, 'flow:migrate', `migrating to or from ${doc.logicId}@${doc.version}`);
  }
  if (to.logicId !== from.logicId || to.version <= from.version) throw new MigrateBadTarget(from.logicId, from.version, to.version);
  // checked on every move too: a target retired while its job runs moves nothing more
  if (args.allowRetired !== true && (await isVersionActive(c, to.logicId, to.version)) === false) throw new MigrateTargetRetired(to.logicId, to.version);
  const problems = renameProblems(from, to, args.renames);
  if (problems.length > 0) throw new MigrateBadRename(problems);
  return { from, to };
}

/** A plan as the API answers it: its simulation without the rewind-only `keptEffects`. */
function wire(p: CorePlan): MigrationPlan {
  const n = p.next;
  return { ...p, next: n === null ? null : { generation: n.generation, steps: n.steps, compensations: n.compensations, stopsAt: n.stopsAt, assumes: n.assumes } };
}

/** What an audit row keeps of each side of a move: the usual summary, with the version. */
function audited(i: Instance) {
  return { ...summary(i), version: i.version };
}
