import { createHash } from 'node:crypto';
import { type LogicVersion, mermaidDiagram, parseLogicVersion } from '../../contracts/index.ts';
import { FuncModuleError, inspectModule } from '../../host-functions/index.ts';
import { grantRefusals, type PublisherGrant } from '../../contracts/grants.ts';
import { type HandlerProfiles, servesIn } from '../executors/handlers.ts';
import { ChildLogicMissing, GrantRefused, HandlerNotCalled, ModuleHashMismatch, ModuleInvalid, ModuleMissing } from '../errors.ts';
import { type AuditRow, insertVersionAudit, listVersionAudit } from '../store/audit.ts';
import type { Db } from '../store/db.ts';
import { NotFound } from '../store/errors.ts';
import type { HandlerUsageList } from '../../contracts/api/handlers.ts';
import { handlerUsage } from '../core/handler-usage.ts';
import { liveGroups, versionsWithLive } from '../store/handler-usage.ts';
import { findVersionRow, listVersions, type VersionRow } from '../store/list-versions.ts';
import { findLogicVersion, publishLogicVersion } from '../store/logic-versions.ts';
import { putModules } from '../store/put-modules.ts';
import { setVersionActive } from '../store/set-version-active.ts';
import { storedModules } from '../store/stored-modules.ts';
import { type Client, inEnv } from '../store/tx.ts';
import type { GrantGate } from './grant-gate.ts';
import type { LogicCache } from './logic-cache.ts';

/** Who acts on a version, for its audit row. (Default actor: `in-process`, a caller inside the engine's process) */
export interface ActedBy {
  actor: string;
  reason?: string | null;
}
const IN_PROCESS: ActedBy = { actor: 'in-process' };

export interface PublishResult {
  /** `new` when this call published it, `unchanged` when the same hash was already published. */
  status: 'new' | 'unchanged';
  logicId: string;
  version: number;
  hash: string;
}

/** A published version as listed: whether it takes new instances, and how many still run on it. */
export type VersionSummary = VersionRow;

export interface VersionDetail extends VersionSummary {
  logicVersion: LogicVersion;
  /** The Mermaid flowchart of the version (the compiler's `.mmd`). */
  diagram: string;
}

/**
 * Publishing, listing and retiring LogicVersions with their WASM modules, in Postgres, so that
 * every engine node sees them without a restart (versions are read by hash on a cache miss,
 * modules by hash on first use).
 */
/** At most this many groups of live instances are looked at by the handler usage report, unless FLOW_USAGE_GROUPS_MAX says otherwise; the rest count as still calling. */
export const DEFAULT_MAX_USAGE_GROUPS = 2000;

export class Versions {
  constructor(
    private readonly db: Db,
    private readonly logics: LogicCache,
    private readonly grants: GrantGate,
    private readonly handlers: HandlerProfiles,
    /** Told, inside the transaction, when a definition's active versions may have changed (its declared schedules follow). */
    private readonly activeChanged: (c: Client, env: string, logicId: string) => Promise<void> = async () => {},
    /** The handler usage report's cap on groups of live instances (FLOW_USAGE_GROUPS_MAX). */
    private readonly maxUsageGroups = DEFAULT_MAX_USAGE_GROUPS,
  ) {}

  /**
   * Validates and publishes a version with the modules it needs, in one transaction. Each module
   * must hash to its key; each module the version names must be uploaded now or stored in the env
   * already. The same (logicId, version) with the same hash is `unchanged`; with another hash it
   * is refused (FLOW_VERSION_CONFLICT). The workflows its `children` steps start must be published
   * first, so a spawn can never name a missing definition. The version may do no more than
   * `publisher` (contracts/grants.ts; else GrantRefused), whose grant is recorded with it; the
   * same hash published again under another such grant records that one (a re-vouch). Uploads
   * the version does not name are not stored.
   */
  async publish(env: string, doc: unknown, modules: Record<string, Uint8Array>, publisher: PublisherGrant): Promise<PublishResult> {
    const logic = parseLogicVersion(doc);
    const refusals = grantRefusals(logic, publisher, servesIn(this.handlers, env));
    if (refusals.length > 0) throw new GrantRefused(logic, refusals);
    const named = new Set(Object.values(logic.modules ?? {}).map((m) => m.sha256));
    const uploads = new Map([...checkedModules(modules)].filter(([sha]) => named.has(sha)));
    for (const [name, m] of Object.entries(logic.modules ?? {})) {
      const bytes = uploads.get(m.sha256);
      if (bytes !== undefined) vetModule(logic, name, bytes, Object.keys(m.imports));
    }
    const result = await inEnv(this.db, env, async (c) => {
      const declared = Object.entries(logic.modules ?? {});
      const stored = await storedModules(c, declared.map(([, m]) => m.sha256).filter((h) => !uploads.has(h)));
      for (const [name, m] of declared) if (!uploads.has(m.sha256) && !stored.has(m.sha256)) throw new ModuleMissing(logic, name, m.sha256);
      for (const [name, step] of Object.entries(logic.steps)) {
        if (step.kind === 'children' && (await findLogicVersion(c, step.logicId, step.version)) === null) {
          throw new ChildLogicMissing(logic, name, step.logicId, step.version);
        }
      }
      await putModules(c, env, uploads);
      const published = await publishLogicVersion(c, env, logic, publisher);
      if (published) {
        const { logicId, version, hash } = logic;
        const actor = publisher.subject ?? IN_PROCESS.actor;
        await insertVersionAudit(c, { env, logicId, version, verb: 'publish', actor, reason: null, args: { hash }, before: null, after: { active: true, hash } });
        await this.activeChanged(c, env, logicId);
      }
      return published;
    });
    this.logics.remember(logic);
    this.grants.forget(env, logic.hash);
    return { status: result ? 'new' : 'unchanged', logicId: logic.logicId, version: logic.version, hash: logic.hash };
  }

  /** The audit rows of a version, oldest first: who published, retired, reactivated it, and why. */
  audit(env: string, logicId: string, version: number): Promise<AuditRow[]> {
    return inEnv(this.db, env, (c) => listVersionAudit(c, logicId, version));
  }

  list(env: string): Promise<VersionSummary[]> {
    return inEnv(this.db, env, (c) => listVersions(c));
  }

  /** Every handler path the env's versions call, and whether it may be turned off now (engine/core/handler-usage.ts). */
  async handlerUsage(env: string, readable: (logicId: string) => boolean, filter: { handler?: string; path?: string } = {}): Promise<HandlerUsageList> {
    const { versions, groups } = await inEnv(this.db, env, async (c) => ({ versions: await versionsWithLive(c), groups: await liveGroups(c, this.maxUsageGroups) }));
    const byVersion = new Map<string, typeof groups>();
    for (const g of groups) byVersion.set(`${g.logicId}@${g.version}`, [...(byVersion.get(`${g.logicId}@${g.version}`) ?? []), g]);
    const report = handlerUsage(versions.map((v) => ({ ...v, groups: byVersion.get(`${v.doc.logicId}@${v.doc.version}`) ?? [], readable: readable(v.doc.logicId) })));
    const { handler, path } = filter;
    const items = report.items
      .filter((h) => handler === undefined || h.handler === handler)
      .map((h) => (path === undefined ? h : { ...h, paths: h.paths.filter((p) => p.path === path) }))
      .filter((h) => h.paths.length > 0);
    // a misspelt name must not read as "nothing calls it, turn it off"
    if (items.length === 0 && (handler !== undefined || path !== undefined)) {
      throw new HandlerNotCalled(env, filter, report.items.map((h) => h.handler));
    }
    return { items, unreadable: report.unreadable };
  }

  async get(env: string, logicId: string, version: number): Promise<VersionDetail> {
    const found = await inEnv(this.db, env, async (c) => {
      const row = await findVersionRow(c, logicId, version);
      return row === null ? null : { row, doc: await findLogicVersion(c, logicId, version) };
    });
    if (found === null || found.doc === null) throw new NotFound(`LogicVersion ${logicId}@${version}`);
    return { ...found.row, logicVersion: found.doc, diagram: mermaidDiagram(found.doc) };
  }

  /** Retires (drains) or reactivates a version; running instances are not touched either way. */
  async setActive(env: string, logicId: string, version: number, active: boolean, by: ActedBy = IN_PROCESS): Promise<VersionSummary> {
    const row = await inEnv(this.db, env, async (c) => {
      const before = await findVersionRow(c, logicId, version);
      if (before === null || !(await setVersionActive(c, logicId, version, active))) return null;
      // a call that changes nothing (retiring a retired version) is no act to audit
      if (before.active !== active) {
        const verb = active ? 'reactivate' : 'retire';
        await insertVersionAudit(c, { env, logicId, version, verb, actor: by.actor, reason: by.reason ?? null, args: {}, before: { active: before.active }, after: { active } });
        await this.activeChanged(c, env, logicId);
      }
      return findVersionRow(c, logicId, version);
    });
    if (row === null) throw new NotFound(`LogicVersion ${logicId}@${version}`);
    return row;
  }
}

/** The uploaded modules, each checked to hash to the key it came under (a lowercase hex sha256). */
/**
 * Refuses at publish a module a step could never load (not wasm, WASI, an import the version does
 * not declare, no memory cap): the same checks the runtime makes before a run, so the mistake
 * surfaces in CI and not on the first instance.
 */
function vetModule(logic: LogicVersion, name: string, bytes: Uint8Array, declaredImports: string[]): void {
  try {
    inspectModule(bytes, declaredImports);
  } catch (err) {
    if (err instanceof FuncModuleError) throw new ModuleInvalid(logic, name, err.code, err.message);
    throw err;
  }
}

function checkedModules(modules: Record<string, Uint8Array>): Map<string, Uint8Array> {
  const checked = new Map<string, Uint8Array>();
  for (const [key, bytes] of Object.entries(modules)) {
    const actual = createHash('sha256').update(bytes).digest('hex');
    if (actual !== key) throw new ModuleHashMismatch(key, actual);
    checked.set(key, bytes);
  }
  return checked;
}
