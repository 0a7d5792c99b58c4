import type { LogicVersion } from '../contracts/index.ts';
import type { GrantRefusal } from '../contracts/grants.ts';
import { FlowError } from '../contracts/errors.ts';

export class BadRequest extends FlowError {
  constructor(what: string, problems: string[]) {
    super('FLOW_BAD_REQUEST', `${what} is invalid: ${problems.join('; ')}`, { status: 400, details: problems });
  }
}

export class InputInvalid extends FlowError {
  constructor(logic: string, problems: string[]) {
    super('FLOW_INPUT_INVALID', `input does not match the input schema of ${logic}: ${problems.join('; ')}`, {
      status: 422,
      details: problems,
    });
  }
}

export class ArtifactInvalid extends FlowError {
  constructor(file: string, why: string) {
    super('FLOW_ARTIFACT_INVALID', `${file}: ${why}`, { status: 422 });
  }
}

export class ChildLogicMissing extends FlowError {
  constructor(logic: LogicVersion, step: string, childId: string, version: number | undefined) {
    super(
      'FLOW_CHILD_LOGIC_MISSING',
      `${logic.logicId}@${logic.version} step ${step} starts ${childId}${version ? `@${version}` : ''}, which is not published: publish it first`,
      { status: 422 },
    );
  }
}

/** An event trigger's `input` expression failed, or its result does not fit the workflow's input schema. */
export class TriggerInputInvalid extends FlowError {
  constructor(eventType: string, logic: string, problems: string[]) {
    super(
      'FLOW_TRIGGER_INPUT_INVALID',
      `event ${eventType} cannot start ${logic}: ${problems.join('; ')}. Nothing was started and the event was not recorded; ` +
        'fix the trigger (publish a new version) or the event, then send it again',
      { status: 422, details: problems },
    );
  }
}

/** A message trigger could not route an event: its match or payload expression, or the payload against the waitFor step's schema. */
export class TriggerRouteInvalid extends FlowError {
  constructor(eventType: string, logic: string, problems: string[]) {
    super(
      'FLOW_TRIGGER_ROUTE_INVALID',
      `event ${eventType} cannot be delivered to instances of ${logic}: ${problems.join('; ')}. Nothing was delivered or started and the event was not recorded; ` +
        'fix the trigger (publish a new version) or the event, then send it again',
      { status: 422, details: problems },
    );
  }
}

export class EventKeyReused extends FlowError {
  constructor(key: string) {
    super('FLOW_EVENT_KEY_REUSED', `idempotency key ${key} was already used by a different event in this environment`, { status: 409 });
  }
}

/**
 * A start reused an idempotency key with a different request. Like FLOW_EVENT_KEY_REUSED for
 * events: the key is refused rather than answered with an instance the caller did not ask for.
 */
export class IdempotencyMismatch extends FlowError {
  constructor(key: string, existingId: string) {
    super(
      'FLOW_IDEMPOTENCY_MISMATCH',
      `idempotency key ${key} was already used in this environment to start workflow ${existingId} of the same definition with a different request ` +
        '(version, input, correlationId or callback); use a new key for a new request, or repeat the original request exactly',
      { status: 409, details: { idempotencyKey: key, workflowId: existingId } },
    );
  }
}

/** `Engine.settled()` gave up: the instance was still moving (or stuck) when its timeout ran out. */
export class SettleTimeout extends FlowError {
  constructor(id: string, state: string, timeoutMs: number) {
    super(
      'FLOW_SETTLE_TIMEOUT',
      `workflow ${id} did not settle within ${timeoutMs} ms (it is ${state}): check that workers run, and listStuck() for why it does not move`,
      { status: 408, details: { id, state } },
    );
  }
}

export class CallbackNotAllowed extends FlowError {
  constructor(host: string) {
    super('FLOW_CALLBACK_HOST_NOT_ALLOWED', `callback.url names ${host}, which is not on the engine's callbackAllowlist`, { status: 403 });
  }
}

export class SecretMissing extends FlowError {
  constructor(envVar: string) {
    super('FLOW_SECRET_MISSING', `${envVar} is not set: in production the engine does not sign with the development secret`, { status: 500 });
  }
}

/** An uploaded module's bytes do not hash to the key they were uploaded under. */
export class ModuleHashMismatch extends FlowError {
  constructor(key: string, actual: string) {
    super(
      'FLOW_MODULE_HASH_MISMATCH',
      `module uploaded as ${key} hashes to ${actual}: upload each module under the hex sha256 of its bytes (modules/<sha256>.wasm)`,
      { status: 422 },
    );
  }
}

/** A version names a module that was neither uploaded with it nor stored in its env before. */
export class ModuleMissing extends FlowError {
  constructor(logic: LogicVersion, name: string, sha256: string) {
    super(
      'FLOW_MODULE_MISSING',
      `${logic.logicId}@${logic.version} module ${name} (${sha256}) is not stored in this environment: upload its bytes with the version`,
      { status: 422 },
    );
  }
}

/** An environment variable holds a value the engine cannot use; boot stops before anything runs. */
export class ConfigInvalid extends FlowError {
  constructor(variable: string, problem: string) {
    super('FLOW_CONFIG_INVALID', `${variable}: ${problem}`, { details: [variable] });
  }
}

/** Production needs real keys to verify API tokens: the HS256 development secret is not enough. */
export class AuthKeysMissing extends FlowError {
  constructor(variable: string) {
    super('FLOW_AUTH_JWKS_MISSING', `${variable} is not set: in production API tokens are verified against a JWKS (a URL or a file path)`);
  }
}

/** The caller's token lacks the scope (or its logicId glob does not match the definition). */
export class ScopeMissing extends FlowError {
  constructor(subject: string, scope: string, what: string) {
    super('FLOW_SCOPE_MISSING', `${subject} needs scope ${scope} (or ${scope}:<glob> matching its ${scope === 'flow:events' ? 'event type' : 'logicId'}) for ${what}`, { status: 403 });
  }
}

/** An uploaded module would be refused when a step loads it (bad wasm, an undeclared import, memory over the cap). */
export class ModuleInvalid extends FlowError {
  constructor(logic: LogicVersion, name: string, code: string, why: string) {
    super('FLOW_MODULE_INVALID', `${logic.logicId}@${logic.version} module ${name}: ${why} [${code}]`, { status: 422, details: [code] });
  }
}

/**
 * A publish whose version would do what its publisher could not do directly (contracts/grants.ts):
 * call a handler that does not serve it, start a definition its publisher may not start, or take
 * events its publisher holds no `flow:events` for. The code is the first refusal's; `details`
 * lists every one, each with the grant that is missing.
 */
export class GrantRefused extends FlowError {
  constructor(logic: LogicVersion, refusals: readonly GrantRefusal[]) {
    const first = refusals[0]!;
    super(
      first.code,
      `${logic.logicId}@${logic.version} does more than its publisher may: ${refusals.map((r) => `${r.message} (missing: ${r.missing})`).join('; ')}`,
      {
        status: 403,
        details: refusals.map((r) => ({ path: r.step !== undefined ? `steps.${r.step}` : r.code === 'FLOW_GRANT_SCHEDULE' ? 'schedules' : 'triggers', message: `[${r.code}] ${r.message} (missing: ${r.missing})` })),
      },
    );
  }
}

/** A verb or a replay of an instance whose data was erased: there is nothing left to run it on. */
export class InstanceErased extends FlowError {
  constructor(id: string, what: string) {
    super('FLOW_INSTANCE_ERASED', `workflow ${id} was erased (its input, outputs and journal payloads are tombstones): ${what} cannot run on it. Start a new instance instead`, { status: 409 });
  }
}

/** Erasure of an instance that has not ended: its data is still being used. */
export class EraseNotEnded extends FlowError {
  constructor(id: string, state: string) {
    super('FLOW_ERASE_NOT_ENDED', `workflow ${id} is ${state}: only an ended instance can be erased. Cancel it first, or wait for it to end`, { status: 409 });
  }
}

/** Erasure of an instance on legal hold: the hold keeps its data as it is. */
export class InstanceHeld extends FlowError {
  constructor(id: string) {
    super('FLOW_INSTANCE_HELD', `workflow ${id} is on legal hold: release the hold (POST …/release-hold, s8flow hold release) before erasing it`, { status: 409 });
  }
}

/** A retention run asked for while another node holds the retention lock. */
export class RetentionBusy extends FlowError {
  constructor() {
    super('FLOW_RETENTION_BUSY', 'another engine node is running retention now: try again when it has finished', { status: 409 });
  }
}

/** A line of an archive file that is not a trace in the `s8flow trace` format. */
export class ArchiveInvalid extends FlowError {
  constructor(file: string, line: number, why: string) {
    super('FLOW_ARCHIVE_INVALID', `${file} line ${line}: ${why} (an archive holds one trace per line, as retention writes them)`, { status: 422 });
  }
}

/** A schedule's cron pattern, time zone, catch-up window or input cannot be used. */
export class ScheduleInvalid extends FlowError {
  constructor(why: string) {
    super('FLOW_SCHEDULE_INVALID', `schedule refused: ${why}`, { status: 422 });
  }
}

/** A schedule a definition declares is managed by its versions, not deleted by hand. */
export class ScheduleDeclared extends FlowError {
  constructor(id: string) {
    super('FLOW_SCHEDULE_DECLARED', `schedule ${id} is declared by its definition: pause it, or remove .schedule() and publish a new version`, {
      status: 409,
    });
  }
}

/** A schedule with this id exists in the env already. */
export class ScheduleExists extends FlowError {
  constructor(id: string) {
    super('FLOW_SCHEDULE_EXISTS', `schedule ${id} exists already: choose another id, or delete it first`, { status: 409 });
  }
}

/** A limit addressed in a scope it cannot have (a per-key limit under `*`, waiting instances of every env). */
export class LimitScopeInvalid extends FlowError {
  constructor(why: string) {
    super('FLOW_LIMIT_SCOPE_INVALID', `${why} (the path's env is the limit's scope: an env id, or * for a handler's limit on every env)`, { status: 400 });
  }
}

/**
 * The handler usage report was asked about a handler (or path) that no version of the env calls,
 * active or retired: more likely a misspelt name than a handler free to turn off.
 */
export class HandlerNotCalled extends FlowError {
  constructor(env: string, filter: { handler?: string; path?: string }, known: string[]) {
    const what = [filter.handler === undefined ? '' : `handler ${filter.handler}`, filter.path === undefined ? '' : `path ${filter.path}`].filter(Boolean).join(', ');
    super(
      'FLOW_UNCALLED_HANDLER',
      `no version of env ${env}, active or retired, calls ${what}: check the name (the handlers its versions call: ${known.join(', ') || 'none'}); a handler or path nothing calls needs nothing from the engine`,
      { status: 404, details: { ...filter, known } },
    );
  }
}

/** A compatibility check whose candidate is of another definition than the one in its path. */
export class CompatLogicMismatch extends FlowError {
  constructor(pathLogicId: string, docLogicId: string) {
    super(
      'FLOW_COMPAT_LOGIC_MISMATCH',
      `the candidate is a version of ${docLogicId}, but the compatibility check was asked of ${pathLogicId}: post it under /logic-versions/${docLogicId}/compatibility`,
      { status: 422, details: { logicId: pathLogicId, candidate: docLogicId } },
    );
  }
}

/** A compatibility check of a candidate against its own version number. */
export class CompatSameVersion extends FlowError {
  constructor(logicId: string, version: number) {
    super(
      'FLOW_COMPAT_SAME_VERSION',
      `the candidate is ${logicId}@${version} and was asked to be compared with version ${version}: a version is compared with another one; name a different "against", or leave it out for the active version below the candidate`,
      { status: 422 },
    );
  }
}

/** A migration whose target is not a later version of the same definition. */
export class MigrateBadTarget extends FlowError {
  constructor(logicId: string, fromVersion: number, toVersion: number) {
    super(
      'FLOW_MIGRATE_BAD_TARGET',
      `instances of ${logicId}@${fromVersion} move only to a later version of ${logicId}, not to version ${toVersion}: name a published version above ${fromVersion}`,
      { status: 422 },
    );
  }
}

/** A migration to a retired version, which the request did not allow (`allowRetired`). */
export class MigrateTargetRetired extends FlowError {
  constructor(logicId: string, toVersion: number) {
    super(
      'FLOW_MIGRATE_TARGET_RETIRED',
      `${logicId}@${toVersion} is retired: instances moved to it would run a version taken out of service; reactivate it, migrate to an active version, or say allowRetired: true (--allow-retired)`,
      { status: 409 },
    );
  }
}

/** A rename map that does not fit the two versions (core/migrate.ts, renameProblems). */
export class MigrateBadRename extends FlowError {
  constructor(problems: string[]) {
    super('FLOW_MIGRATE_BAD_RENAME', `the rename map does not fit the versions: ${problems.join('; ')}`, { status: 422, details: problems });
  }
}

/** A migration request whose selection contradicts itself: ids with a filter, or a filter on another definition or version. */
export class MigrateBadSelection extends FlowError {
  constructor(message: string) {
    super('FLOW_MIGRATE_BAD_SELECTION', message, { status: 422 });
  }
}
