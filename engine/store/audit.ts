import type { Client } from './tx.ts';

/** An audit row to write: what a verb did to which instance. */
export type AuditEntry = Omit<AuditRow, 'at'> & { workflowId: string; env: string };

export async function insertAudit(c: Client, e: AuditEntry): Promise<void> {
  await c.query(
    `INSERT INTO audit (env_id, workflow_id, verb, actor, reason, args, before, after) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
    [e.env, e.workflowId, e.verb, e.actor, e.reason, JSON.stringify(e.args ?? {}), JSON.stringify(e.before), JSON.stringify(e.after)],
  );
}

/** An audit row as read back: actor, reason, before, after, at. */
export interface AuditRow {
  verb: string;
  actor: string;
  reason: string | null;
  args: unknown;
  before: unknown;
  after: unknown;
  at: Date;
}

export async function listAudit(c: Client, workflowId: string): Promise<AuditRow[]> {
  const res = await c.query<AuditRow>('SELECT verb, actor, reason, args, before, after, at FROM audit WHERE workflow_id = $1 ORDER BY id', [
    workflowId,
  ]);
  return res.rows;
}

/** An audit row about a version: published, retired, reactivated. */
export type VersionAuditEntry = Omit<AuditRow, 'at'> & { env: string; logicId: string; version: number };

export async function insertVersionAudit(c: Client, e: VersionAuditEntry): Promise<void> {
  await c.query(
    `INSERT INTO audit (env_id, logic_id, version, verb, actor, reason, args, before, after) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
    [e.env, e.logicId, e.version, e.verb, e.actor, e.reason, JSON.stringify(e.args ?? {}), JSON.stringify(e.before), JSON.stringify(e.after)],
  );
}

export async function listVersionAudit(c: Client, logicId: string, version: number): Promise<AuditRow[]> {
  const res = await c.query<AuditRow>(
    'SELECT verb, actor, reason, args, before, after, at FROM audit WHERE workflow_id IS NULL AND logic_id = $1 AND version = $2 ORDER BY id',
    [logicId, version],
  );
  return res.rows;
}

/** Which env a workflow belongs to, read as the scheduler: callers never get to say. */
export async function envOfWorkflow(c: Client, id: string): Promise<string | null> {
  const res = await c.query<{ env_id: string }>('SELECT env_id FROM workflows WHERE id = $1', [id]);
  return res.rows[0]?.env_id ?? null;
}

/** An audit row about a limit (set or removed through the API): `env` is its scope, an env or `*`. */
export type LimitAuditEntry = Omit<AuditRow, 'at'> & { env: string; resource: string };

export async function insertLimitAudit(c: Client, e: LimitAuditEntry): Promise<void> {
  await c.query(
    `INSERT INTO audit (env_id, resource, verb, actor, reason, args, before, after) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
    [e.env, e.resource, e.verb, e.actor, e.reason, JSON.stringify(e.args ?? {}), JSON.stringify(e.before), JSON.stringify(e.after)],
  );
}

export async function listLimitAudit(c: Client, resource: string): Promise<AuditRow[]> {
  const res = await c.query<AuditRow>('SELECT verb, actor, reason, args, before, after, at FROM audit WHERE resource = $1 ORDER BY id', [resource]);
  return res.rows;
}
