import type { CompatibilityGroup, CompatibilityReport } from '../../contracts/api/compatibility.ts';
import { FlowError, type LogicVersion, parseLogicVersion } from '../../contracts/index.ts';
import { compatibility } from '../core/compatibility.ts';
import type { Instance } from '../core/instance.ts';
import { previewContinue } from '../core/preview.ts';
import { CompatLogicMismatch, CompatSameVersion } from '../errors.ts';
import { compatibilityGroups } from '../store/compatibility-groups.ts';
import type { Db } from '../store/db.ts';
import { NotFound } from '../store/errors.ts';
import { findComparedVersion } from '../store/find-compared-version.ts';
import { loadWorkflow } from '../store/load-workflow.ts';
import { lastEnded } from '../store/last-ended.ts';
import { inEnv } from '../store/tx.ts';
import { type Trace, ReplayDivergence, replay } from '../testing/trace.ts';
import { readTrace } from './export-trace.ts';

/** At most this many groups are listed and evaluated, unless FLOW_COMPAT_GROUPS_MAX says otherwise; past it the report says `truncated` and cannot be safe. */
export const DEFAULT_MAX_COMPAT_GROUPS = 500;

/**
 * The compatibility report (docs/versions.md): the live instances of a published version, grouped
 * by shape in the database, each group judged from its shape by the pure core and its
 * representative's next steps simulated on the candidate; with `replay`, the last ended instances
 * replayed on the candidate too. Reads only; calls nothing.
 */
export async function compatibilityReport(
  db: Db,
  env: string,
  logicId: string,
  doc: unknown,
  against?: number,
  opts: { maxGroups?: number; replay?: number } = {},
): Promise<CompatibilityReport> {
  const to = parseLogicVersion(doc);
  if (to.logicId !== logicId) throw new CompatLogicMismatch(logicId, to.logicId);
  if (against === to.version) throw new CompatSameVersion(logicId, to.version);
  const read = await inEnv(db, env, async (c) => {
    const from = await findComparedVersion(c, logicId, to.version, against);
    if (from === null) return null;
    const found = await compatibilityGroups(c, logicId, from.version, opts.maxGroups ?? DEFAULT_MAX_COMPAT_GROUPS);
    const representatives = new Map<string, Instance>();
    for (const g of found.groups) {
      const stored = await loadWorkflow(c, g.representative);
      if (stored !== null) representatives.set(g.representative, stored.instance);
    }
    const traces: Trace[] = [];
    for (const id of opts.replay ? await lastEnded(c, logicId, from.version, opts.replay) : []) traces.push(await readTrace(c, id));
    return { from, found, representatives, traces };
  });
  const candidate = { version: to.version, hash: to.hash };
  if (read === null) {
    if (against !== undefined) throw new NotFound(`LogicVersion ${logicId}@${against}`);
    return { logicId, candidate, against: null, verdict: 'safe', live: 0, unsafe: 0, groups: [], truncated: false };
  }
  const { from, found, representatives, traces } = read;
  const groups: CompatibilityGroup[] = [];
  for (const g of found.groups) {
    const { verdict, reasons } = compatibility(from, to, g);
    const rep = representatives.get(g.representative);
    // the representative may have moved on since the grouping read it: its own step is what the simulation needs
    const simulable = rep !== undefined && (rep.currentStep === null || to.steps[rep.currentStep] !== undefined) && rep.version === from.version;
    const next = simulable ? await previewContinue(to, rep) : null;
    groups.push({
      ...g,
      verdict,
      reasons,
      next: next === null ? null : { generation: next.generation, steps: next.steps, compensations: next.compensations, stopsAt: next.stopsAt, assumes: next.assumes },
    });
  }
  const truncated = found.groupCount > found.groups.length;
  const unsafe = groups.filter((g) => g.verdict === 'unsafe').reduce((n, g) => n + g.count, 0);
  return {
    logicId,
    candidate,
    against: { version: from.version, hash: from.hash },
    verdict: unsafe > 0 || truncated ? 'unsafe' : 'safe',
    live: found.live,
    unsafe,
    groups,
    truncated,
    ...(opts.replay === undefined || opts.replay === 0 ? {} : { replays: await replayOn(to, traces) }),
  };
}

/**
 * Replays recorded runs of N on the candidate (`replay`, the replayer of sentin8-flow/testing: the
 * pure core fed each journalled event, nothing called) and keeps where each first decides otherwise.
 */
async function replayOn(to: LogicVersion, traces: Trace[]): Promise<NonNullable<CompatibilityReport['replays']>> {
  const result: NonNullable<CompatibilityReport['replays']> = { replayed: traces.length, same: 0, erased: 0, diverged: [] };
  for (const trace of traces) {
    try {
      await replay(to, trace);
      result.same++;
    } catch (err) {
      if (err instanceof FlowError && err.code === 'FLOW_INSTANCE_ERASED') {
        result.erased++;
        continue;
      }
      if (!(err instanceof ReplayDivergence)) throw err;
      const { index, event, step, attempt, field } = err.divergence;
      result.diverged.push({ id: trace.initial.id, index, event, step, attempt, field });
    }
  }
  return result;
}
