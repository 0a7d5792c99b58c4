import { FlowError } from '../../contracts/errors.ts';

/** SQLSTATE codes the store reacts to. Match on these, never on message text. */
export const SqlState = {
  uniqueViolation: '23505',
  insufficientPrivilege: '42501',
  checkViolation: '23514',
  adminShutdown: '57P01',
  cannotConnectNow: '57P03',
} as const;

export function sqlStateOf(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** SQLSTATE classes (the first two characters) that mean "not this data", never "not now". */
export const DataRefusalClass = {
  dataException: '22',
  programLimitExceeded: '54',
} as const;

/**
 * Whether a statement failed for the data it carried — a data exception (a jsonb string with
 * NUL, a timestamp out of range) or a program limit (a value too large) — so sending it again
 * can never succeed. A lost connection, a deadlock or a shutdown is not.
 */
export function refusedForData(err: unknown): boolean {
  const state = sqlStateOf(err);
  return state !== undefined && state.length === 5 && Object.values(DataRefusalClass).some((c) => state.startsWith(c));
}

/** Behind a transaction-mode pooler the connection's search_path must already name the schema. */
export class PoolerSearchPath extends FlowError {
  constructor(schema: string, found: string) {
    super(
      'FLOW_DB_SEARCH_PATH',
      `the database URL goes through a pooler (?pgbouncer=true), which sends no startup options, and its connections' search_path is "${found}", not "${schema}": ` +
        `give the engine's role the schema (ALTER ROLE <role> SET search_path = ${schema}) or set PgBouncer's connect_query for the database`,
    );
  }
}

export class VersionConflict extends FlowError {
  constructor(logicId: string, version: number, existing: string, offered: string) {
    super(
      'FLOW_VERSION_CONFLICT',
      `${logicId}@${version} is already published with ${existing}; this one hashes to ${offered}. ` +
        'A published version is immutable: bump the version and publish again.',
      { status: 409 },
    );
  }
}

export class TransitionRefused extends FlowError {
  constructor(id: string, from: string, cause: string, to: string) {
    super('FLOW_TRANSITION_REFUSED', `workflow ${id}: ${from} --${cause}--> ${to} is not in the transition table`, {
      status: 409,
    });
  }
}

/** The row changed under us (another worker or verb won); re-read and decide again. */
export class ConcurrentUpdate extends FlowError {
  constructor(id: string) {
    super('FLOW_CONCURRENT_UPDATE', `workflow ${id} changed while this change was being made; re-read it and retry`, {
      status: 409,
    });
  }
}

export class NotFound extends FlowError {
  constructor(what: string) {
    super('FLOW_NOT_FOUND', `${what} was not found in this environment`, { status: 404 });
  }
}

export class BadEnvName extends FlowError {
  constructor(env: string) {
    super('FLOW_BAD_ENV', `environment name ${JSON.stringify(env.slice(0, 80))} is not 1–64 characters of valid Unicode without control characters`, {
      status: 400,
    });
  }
}

export class BadSchemaName extends FlowError {
  constructor(name: string) {
    super('FLOW_BAD_SCHEMA_NAME', `schema name "${name}" must match ^[a-z_][a-z0-9_]{0,62}$`);
  }
}

/** A retired (drained) version takes no new instances; those already running finish on it. */
export class VersionRetired extends FlowError {
  constructor(logicId: string, version: number | undefined) {
    super(
      'FLOW_VERSION_RETIRED',
      version === undefined
        ? `every version of ${logicId} is retired, so no new instance starts; reactivate one or publish a new version`
        : `${logicId}@${version} is retired, so no new instance starts on it; start the active version or reactivate this one`,
      { status: 409 },
    );
  }
}
