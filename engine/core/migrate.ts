/**
 * The migrate verb's core (docs/versions.md, "Migrating instances"): whether one instance of
 * version N may move to a later version of its definition, and the move itself, as a pure
 * transition that the engine journals and a replay re-derives.
 *
 * Whether it may move is the compatibility report's verdict on the instance's own shape
 * (`compatibility`, with the rename map), plus what only a single instance can tell: its state,
 * and whether a rename would change the key of a call already under way.
 *
 * Compensations: a registered compensation is resolved on the version the instance is pinned to
 * when it unwinds, so after the move N+1 runs it. The move is therefore refused unless N+1 holds
 * the very same compensation of that step (the compatibility verdict's compensation reasons), and
 * unless the step keeps its name: a renamed step's compensation would carry another key than the
 * one its effect's owner expects (`<key>:compensate`).
 *
 * Keys: the move keeps the attempt under way (its row, its key, its retry budget) and every
 * counter that derives keys (attempts, visits, generation) under the renamed steps, so the calls
 * after the move carry the keys the instance would have used on N — a step already run and entered
 * again gets its next visit's key, never the first one's.
 */
import type { LogicVersion } from '../../contracts/index.ts';
import { type CompatReason, CompatCode, compatibility, type InstanceShape, type StepRenames } from './compatibility.ts';
import { Refused } from './errors.ts';
import type { Ctx, Instance } from './instance.ts';
import { type ContinuePreview, previewContinue } from './preview.ts';
import type { Transition } from './transition.ts';

export type { StepRenames } from './compatibility.ts';

/** Why one instance may not move: each a stable code (docs/errors.md). */
export const MigrateCode = {
  /** A worker holds it, running a step: try again once it is parked or between steps. */
  processing: 'FLOW_MIGRATE_PROCESSING',
  /** Neither parked nor between steps: compensating, or ended. */
  state: 'FLOW_MIGRATE_STATE',
  /** Not (or no longer) on the version the migration moves from: another version, or moved already. */
  wrongVersion: 'FLOW_MIGRATE_WRONG_VERSION',
  /** The compatibility verdict on its shape is unsafe. */
  unsafe: 'FLOW_MIGRATE_UNSAFE',
  /** A registered compensation would not stay the one its step registered. */
  compensation: 'FLOW_MIGRATE_COMPENSATION',
  /** The step it is at calls out and has an attempt under way: renaming it would change the attempt's key. */
  renameInFlight: 'FLOW_MIGRATE_RENAME_IN_FLIGHT',
} as const;
export type MigrateCode = (typeof MigrateCode)[keyof typeof MigrateCode];

export interface MigrateRefusal {
  code: MigrateCode;
  message: string;
  /** True when the same request may succeed later without a change (the instance is processing). */
  retryable: boolean;
  /** The compatibility reasons behind FLOW_MIGRATE_UNSAFE and FLOW_MIGRATE_COMPENSATION. */
  reasons: CompatReason[];
}

/** The migration's refusal of one instance, thrown by `migrate` (409; nothing changed). */
export class MigrateRefused extends Refused {
  constructor(readonly refusal: MigrateRefusal) {
    super(refusal.code, refusal.message);
  }
}

const CALLS_OUT = new Set(['proxy', 'http', 'func']);
const COMPENSATION_CODES: ReadonlySet<string> = new Set([CompatCode.compensationMissing, CompatCode.compensationChanged]);

/**
 * Problems with a rename map itself, whatever the instance (empty: it is usable). Every renamed
 * step must be a step of N, and its new name a step of N+1; no two steps of N may end under one
 * name; and a name renamed away may not be a step of N+1, whose calls would then carry the keys
 * the old step's calls carried.
 */
export function renameProblems(from: LogicVersion, to: LogicVersion, renames: StepRenames): string[] {
  const problems: string[] = [];
  for (const [old, now] of Object.entries(renames)) {
    if (from.steps[old] === undefined) problems.push(`${old} is not a step of ${from.logicId}@${from.version}`);
    if (to.steps[now] === undefined) problems.push(`${now} (the new name of ${old}) is not a step of ${to.logicId}@${to.version}`);
    if (old !== now && to.steps[old] !== undefined) {
      problems.push(`${old} is renamed, but ${to.logicId}@${to.version} has a step ${old} too: its calls would carry the keys ${old}'s calls carried`);
    }
  }
  const seen = new Map<string, string>();
  for (const name of Object.keys(from.steps)) {
    const now = renames[name] ?? name;
    const other = seen.get(now);
    if (other !== undefined) problems.push(`${other} and ${name} would both be named ${now}`);
    seen.set(now, name);
  }
  return problems;
}

/** The shape the compatibility core judges, of one instance (as store/compatibility-groups.ts groups them). */
export function shapeOf(inst: Instance): InstanceShape {
  const c = inst.ctx;
  return {
    state: inst.state as InstanceShape['state'],
    currentStep: inst.currentStep,
    running: c.running?.kind ?? null,
    generation: inst.generation,
    outputs: [...new Set(c.order)].sort(),
    compensations: [...new Set(c.compensations.filter((r) => r.state !== 'succeeded').map((r) => r.step))].sort(),
  };
}

/**
 * What the instance's row tells beyond the instance itself, as the store reads it (under the
 * database clock, and under the row lock when it moves).
 */
export interface RowFacts {
  /**
   * A worker holds its lease now: a waiting instance whose timer fired and was claimed (it stays
   * `waiting` while the worker applies the wake-up). (Default: false)
   */
  held?: boolean;
  /** Names of the messages buffered for it, sorted (compatibility's `messages`). (Default: none) */
  messages?: string[];
}

/** Why `inst` may not move from `from` to `to` under `renames`, or null when it may. */
export function migrationRefusal(from: LogicVersion, to: LogicVersion, inst: Instance, renames: StepRenames, row: RowFacts = {}): MigrateRefusal | null {
  const refuse = (code: MigrateCode, message: string, reasons: CompatReason[] = []): MigrateRefusal => ({
    code,
    message,
    retryable: code === MigrateCode.processing,
    reasons,
  });
  if (inst.logicId !== from.logicId || inst.logicHash !== from.hash) {
    return refuse(MigrateCode.wrongVersion, `workflow ${inst.id} is on ${inst.logicId}@${inst.version}, not ${from.logicId}@${from.version}`);
  }
  if (inst.state === 'processing') {
    return refuse(MigrateCode.processing, `workflow ${inst.id} is running step ${inst.currentStep}: try again once it is parked or between steps`);
  }
  if (row.held === true && (inst.state === 'pending' || inst.state === 'waiting')) {
    // moved under the worker, the wake-up it applies would be decided on the version it read
    return refuse(MigrateCode.processing, `workflow ${inst.id} is ${inst.state} at ${inst.currentStep} but held by a worker applying its wake-up: try again once it is parked or between steps`);
  }
  if (inst.state !== 'pending' && inst.state !== 'waiting') {
    return refuse(MigrateCode.state, `workflow ${inst.id} is ${inst.state}: only an instance parked (waiting) or between steps (pending) moves`);
  }
  const running = inst.ctx.running;
  if (running?.kind === 'step' && renames[running.step] !== undefined && CALLS_OUT.has(from.steps[running.step]?.kind ?? '')) {
    return refuse(
      MigrateCode.renameInFlight,
      `workflow ${inst.id} has a call of ${running.step} under way (key ${running.idempotencyKey}): renaming the step would change the key of its next attempt`,
    );
  }
  const renamedCompensations = shapeOf(inst).compensations.filter((s) => renames[s] !== undefined && renames[s] !== s);
  if (renamedCompensations.length > 0) {
    return refuse(
      MigrateCode.compensation,
      `workflow ${inst.id} has a compensation of ${renamedCompensations.join(', ')} registered: renamed, it would run under another key than its effect's`,
    );
  }
  const { verdict, reasons } = compatibility(from, to, { ...shapeOf(inst), messages: row.messages ?? [] }, renames);
  if (verdict === 'safe') return null;
  const compensations = reasons.filter((r) => COMPENSATION_CODES.has(r.code));
  if (compensations.length > 0) return refuse(MigrateCode.compensation, compensations.map((r) => r.message).join('; '), reasons);
  return refuse(MigrateCode.unsafe, reasons.map((r) => r.message).join('; '), reasons);
}

/**
 * Moves `inst` from `from` to `to`: pinned to `to`, every step it holds anything of under its new
 * name, and nothing else changed — same state, same attempt under way and key, same timers. Throws
 * MigrateRefused when `migrationRefusal` refuses it.
 */
export function migrate(from: LogicVersion, to: LogicVersion, inst: Instance, renames: StepRenames, row: RowFacts = {}): Transition {
  const refusal = migrationRefusal(from, to, inst, renames, row);
  if (refusal !== null) throw new MigrateRefused(refusal);
  const moved: Instance = { ...renamed(inst, renames), version: to.version, logicHash: to.hash };
  return { instance: moved, cause: 'verb.migrate', attempts: [], commands: [], runAfterMs: null, outputsChanged: [] };
}

/** The instance with every step name it holds renamed (its outputs' values untouched). */
export function renamed(inst: Instance, renames: StepRenames): Instance {
  const rn = (s: string) => renames[s] ?? s;
  const keysRenamed = <V>(o: Record<string, V>) => Object.fromEntries(Object.entries(o).map(([k, v]) => [rn(k), v]));
  const c = inst.ctx;
  const ctx: Ctx = {
    ...c,
    outputs: keysRenamed(c.outputs),
    order: c.order.map(rn),
    attempts: keysRenamed(c.attempts),
    running: c.running === null ? null : { ...c.running, step: rn(c.running.step) },
    compensations: c.compensations.map((r) => ({ ...r, step: rn(r.step) })),
    ...(c.visits === undefined ? {} : { visits: keysRenamed(c.visits) }),
    // funcKey: `<kind>:<step>:<generation>…`; a step name holds no colon
    ...(c.funcs === undefined
      ? {}
      : { funcs: Object.fromEntries(Object.entries(c.funcs).map(([k, v]) => [k.replace(/^([^:]+):([^:]+)/, (_m, kind: string, s: string) => `${kind}:${rn(s)}`), v])) }),
    ...(c.rewinding === undefined ? {} : { rewinding: { ...c.rewinding, step: rn(c.rewinding.step) } }),
  };
  return { ...inst, currentStep: inst.currentStep === null ? null : rn(inst.currentStep), ctx };
}

/** The dry run of one instance's move: where it lands, what runs next under which keys, or why it stays. */
export interface MigrationPlan {
  workflowId: string;
  state: string;
  from: { version: number; step: string | null };
  refusal: MigrateRefusal | null;
  /** Where it would be on the target: its step under its new name. Null when refused. */
  lands: { version: number; step: string | null } | null;
  /** The attempt under way that moves with it, under the key it already carries. */
  keeps: { step: string; attempt: number; idempotencyKey: string } | null;
  /** What would run next on the target (the compatibility report's simulation); null when refused. */
  next: ContinuePreview | null;
}

/** Dry run of `migrate` for one instance: changes nothing, calls nothing. */
export async function migrationPlan(from: LogicVersion, to: LogicVersion, inst: Instance, renames: StepRenames, row: RowFacts = {}): Promise<MigrationPlan> {
  const base = { workflowId: inst.id, state: inst.state, from: { version: inst.version, step: inst.currentStep } };
  const refusal = migrationRefusal(from, to, inst, renames, row);
  if (refusal !== null) return { ...base, refusal, lands: null, keeps: null, next: null };
  const moved = migrate(from, to, inst, renames, row).instance;
  const running = moved.ctx.running;
  return {
    ...base,
    refusal: null,
    lands: { version: to.version, step: moved.currentStep },
    keeps: running === null ? null : { step: running.step, attempt: running.attempt, idempotencyKey: running.idempotencyKey },
    next: await previewContinue(to, moved),
  };
}

/** One instance of a shape group, as the dry run's page reads it: its id and place, and the attempt under way. */
export interface GroupMember {
  id: string;
  state: string;
  version: number;
  currentStep: string | null;
  runningAttempt: { step: string; attempt: number; idempotencyKey: string } | null;
}

/**
 * The plan of `member` from the plan of its group's representative: the same refusal, landing and
 * next steps, under the member's own id. It holds because the group's shape fixes everything the
 * refusal reads and everything a key is made of but the id — the step, the generation and the
 * visit (keys.step); only the attempt under way (its number, the key it already carries) is the
 * member's own. The steps next are the representative's simulation: an instance whose outputs
 * route a choice elsewhere would take that route instead (the compatibility report's premise).
 */
export function memberPlan(rep: MigrationPlan, member: GroupMember, renames: StepRenames): MigrationPlan {
  const own = (s: string) => s.replaceAll(rep.workflowId, member.id);
  const running = member.runningAttempt;
  return {
    workflowId: member.id,
    state: member.state,
    from: { version: member.version, step: member.currentStep },
    refusal: rep.refusal === null ? null : { ...rep.refusal, message: own(rep.refusal.message), reasons: rep.refusal.reasons.map((r) => ({ ...r, message: own(r.message) })) },
    lands: rep.lands,
    keeps: rep.refusal !== null || running === null ? null : { step: renames[running.step] ?? running.step, attempt: running.attempt, idempotencyKey: running.idempotencyKey },
    next:
      rep.next === null
        ? null
        : {
            ...rep.next,
            steps: rep.next.steps.map((s) => ({ ...s, idempotencyKey: s.idempotencyKey === null ? null : own(s.idempotencyKey) })),
            keptEffects: rep.next.keptEffects.map((k) => ({ ...k, compensationKey: own(k.compensationKey) })),
          },
  };
}
