import { randomUUID } from 'node:crypto';
import type { LogicVersion } from '../../contracts/index.ts';
import { begin } from '../core/flow.ts';
import { initialCtx, type Instance, type JsonValue } from '../core/instance.ts';
import { schemaProblems } from '../core/schemas.ts';
import { InputInvalid } from '../errors.ts';
import { insertWorkflow } from '../store/insert-workflow.ts';
import type { Client } from '../store/tx.ts';
import type { LogicCache } from './logic-cache.ts';

export interface StartSpec {
  env: string;
  input: unknown;
  correlationId: string | null;
  /** The same key in the env returns the first instance instead of starting another. */
  idempotencyKey: string | null;
  /** Terminal-state notifications go here (a `callback` outbox row per terminal transition). */
  callbackUrl: string | null;
}

/**
 * Starts an instance of `logic` (the version it is pinned to for life) inside the caller's
 * env-scoped transaction: checks the input, enters the first step and inserts the instance with
 * its first transition. Shared by API starts and event triggers.
 */
export async function startPinned(c: Client, logics: LogicCache, logic: LogicVersion, spec: StartSpec): Promise<{ id: string; created: boolean }> {
  const problems = schemaProblems(logic.input, spec.input);
  if (problems.length > 0) throw new InputInvalid(`${logic.logicId}@${logic.version}`, problems);
  logics.remember(logic);
  const initial = newInstance(logic, spec);
  const t = await begin(logic, initial);
  return insertWorkflow(c, t, spec.idempotencyKey, spec.callbackUrl, initial);
}

export function newInstance(logic: LogicVersion, spec: Pick<StartSpec, 'env' | 'input' | 'correlationId'>): Instance {
  return {
    id: randomUUID(),
    env: spec.env,
    domain: logic.domain,
    logicId: logic.logicId,
    version: logic.version,
    logicHash: logic.hash,
    state: 'pending',
    input: spec.input as JsonValue,
    output: null,
    currentStep: logic.start,
    error: null,
    generation: 0,
    correlationId: spec.correlationId,
    parentId: null,
    parentSeq: null,
    branchIndex: null,
    ctx: initialCtx(),
  };
}
