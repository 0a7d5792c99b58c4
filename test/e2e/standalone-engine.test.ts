import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFlowClient, FlowApiError } from '../../client/index.ts';
import { compile } from '../../compiler/index.ts';
import type { LogicVersion, WorkflowRecord } from '../../contracts/index.ts';
import { type DemoService, startDemoService } from '../../examples/demo-service.ts';
import { token } from '../api/support.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { EXAMPLES } from '../compiler/project-helpers.ts';
import { WorkerProcess } from '../support/worker-process.ts';

/**
 * The standalone engine end to end: `s8flow start` as a child process on
 * Postgres serves the API and runs the workers; CI publishes the compiled examples with
 * `s8flow publish --to http://…`; an owning service starts a payment over HTTP, answers one step
 * 202 and completes it later through /v1/callbacks/{token}; an approver's token answers the
 * decision; the instance completes, and the audit names the token subjects.
 */

const BIN = new URL('../../bin/s8flow.mjs', import.meta.url).pathname;
const url = process.env['DATABASE_URL'];
const ENV = 'e2e';
const AUTH_SECRET = 'e2e-only-hs256-secret-0123456789abcdef';
const run = promisify(execFile);

describe.skipIf(url === undefined)('the standalone engine, end to end on Postgres', () => {
  const schema = `flow_e2e_${Date.now().toString(36)}`;
  const dir = mkdtempSync(join(tmpdir(), 's8flow-e2e-'));
  const out = join(dir, 'dist');
  let service: DemoService;
  let engine: WorkerProcess;
  let engineUrl: string;
  const mint = (sub: string, scope: string) => token({ sub, envs: [ENV], scope, secret: AUTH_SECRET });

  const publish = async (from: string, tok: string) => {
    try {
      const r = await run(process.execPath, [BIN, 'publish', '--to', engineUrl, '--token', tok, '--env', ENV, '--from', from]);
      return { code: 0, stdout: r.stdout, stderr: r.stderr };
    } catch (err) {
      const e = err as { code: number; stdout: string; stderr: string };
      return { code: e.code, stdout: e.stdout, stderr: e.stderr };
    }
  };

  beforeAll(async () => {
    await compile({ root: EXAMPLES, out, lockPath: join(dir, 'flow.lock.json') });
    service = await startDemoService();
    engine = await WorkerProcess.start({
      databaseUrl: url!,
      schema,
      env: ENV,
      handlerUrl: service.url,
      api: true,
      args: ['--port', '0', '--host', '127.0.0.1'],
      extraEnv: { FLOW_AUTH_SECRET: AUTH_SECRET, FLOW_HANDLER_PAYMENTS_URL: service.url },
      readyTimeoutMs: 60_000,
    });
    const listening = engine.output.map((l) => /API listening on (http:\/\/\S+)/.exec(l)?.[1]).find((u) => u !== undefined);
    expect(listening, engine.output.join('\n')).toBeDefined();
    engineUrl = listening!;
    service.connect(engineUrl);
  }, 180_000);

  afterAll(async () => {
    await engine?.stop();
    await service?.close();
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await client.end();
    rmSync(dir, { recursive: true, force: true });
  });

  it('publishes over HTTP, runs a payment through a 202 callback and an approval, and audits the token subjects', async () => {
    // CI publishes: new, then unchanged on a re-run
    const ci = await mint('ci@deploy', 'flow:publish flow:start:provisioning.* flow:start:statements.monthly flow:events:account.opened flow:events:ledger.funds_settled');
    const first = await publish(out, ci);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toMatch(/^new\s+payments\.capture@2 sha256:/m);
    expect(first.stdout).toMatch(/^new\s+provisioning\.tenant@1/m);
    const again = await publish(out, ci);
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/^unchanged\s+payments\.capture@2/m);
    expect(again.stdout).not.toMatch(/^new/m);

    // the payments service starts a risky payment over HTTP
    const payments = createFlowClient({ baseUrl: engineUrl, env: ENV, token: await mint('payments-service', 'flow:start:payments.* flow:read:payments.*') });
    const input = { paymentId: 'pay-e2e', accountId: 'acct-risky', amount: 120, currency: 'EUR', customerEmail: 'e2e@example.com' };
    const started = await payments.start({ logicId: 'payments.capture', input, correlationId: 'pay-e2e' }, { idempotencyKey: 'pay-e2e' });
    expect(started.created).toBe(true);
    const replay = await payments.start({ logicId: 'payments.capture', input, correlationId: 'pay-e2e' }, { idempotencyKey: 'pay-e2e' });
    expect(replay).toMatchObject({ created: false, record: { id: started.record.id } });
    const id = started.record.id;

    const until = async (done: (r: WorkflowRecord) => boolean): Promise<WorkflowRecord> => {
      for (;;) {
        const r = await payments.get(id);
        if (done(r)) return r;
        if (['failed', 'compensated', 'cancelled', 'dead_lettered'].includes(r.state)) throw new Error(`ended ${r.state}: ${JSON.stringify(r.error)}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    };
    const parked = await until((r) => r.state === 'waiting' && r.currentStep === 'approval');
    expect(parked.steps.map((s) => s.step)).toEqual(['reserve', 'score', 'needsApproval', 'approval']);

    // a token without the step's approverScope is refused; alice's answers the decision
    const clerk = createFlowClient({ baseUrl: engineUrl, env: ENV, token: await mint('clerk', 'flow:decide') });
    await expect(clerk.decide(id, 'approval', { option: 'approve', payload: {} })).rejects.toMatchObject({ status: 403, code: 'FLOW_APPROVER_FORBIDDEN' });
    const alice = createFlowClient({ baseUrl: engineUrl, env: ENV, token: await mint('alice@payments', 'flow:decide payments:approve') });
    await alice.decide(id, 'approval', { option: 'approve', payload: { note: 'known customer' }, reason: 'checked the chargebacks' });

    // the owning service answered notify with 202 and completed it through the callback route
    const done = await until((r) => r.state === 'completed');
    expect(done.output).toMatchObject({ paymentId: 'pay-e2e', approved: true });
    const notify = done.steps.filter((s) => s.step === 'notify');
    expect(notify).toHaveLength(1);
    expect(notify[0]).toMatchObject({ state: 'succeeded', output: { sent: true } });
    expect(service.log.find((l) => l.path === '/notify')?.status).toBe(202);
    // the service notes the callback's answer when it reaches it, which may be after the commit
    // that completed the instance (seen under CI load): wait for the note, not for a time
    for (let i = 0; i < 200 && service.callbacks.length === 0; i++) await new Promise((resolve) => setTimeout(resolve, 25));
    expect(service.callbacks).toEqual([{ workflowId: id, state: 'completed' }]);

    // the audit names the token subject, never a body field, and so does the decision the later
    // steps see (and forward as X-Flow-Approved-By)
    expect(done.steps.find((s) => s.step === 'approval')?.output).toMatchObject({ option: 'approve', approvedBy: 'alice@payments' });
    const reader = createFlowClient({ baseUrl: engineUrl, env: ENV, token: await mint('auditor', 'flow:read') });
    const history = await fetch(`${engineUrl}/v1/envs/${ENV}/workflows/${id}/history`, {
      headers: { authorization: `Bearer ${await mint('auditor', 'flow:read')}` },
    }).then((r) => r.json() as Promise<{ audit: unknown[] }>);
    expect(history.audit).toEqual([expect.objectContaining({ verb: 'resume', actor: 'alice@payments', reason: 'checked the chargebacks' })]);
    expect((await reader.get(id)).state).toBe('completed');

    // the payments service's token is narrowed to payments.*: it cannot start provisioning
    await expect(payments.start({ logicId: 'provisioning.tenant', input: {} })).rejects.toMatchObject({ status: 403, code: 'FLOW_SCOPE_MISSING' });

    // a changed definition under a published version is a conflict: printed, and exit code 1
    const changedDir = join(dir, 'changed');
    cpSync(out, changedDir, { recursive: true });
    const file = join(changedDir, 'payments.capture@2.json');
    const doc = JSON.parse(readFileSync(file, 'utf8')) as LogicVersion;
    writeFileSync(file, JSON.stringify(makeLogic({ ...doc, description: 'changed without a version bump' })));
    const conflict = await publish(changedDir, ci);
    expect(conflict.code).toBe(1);
    expect(conflict.stdout).toMatch(/^conflict\s+payments\.capture@2/m);
    expect(conflict.stdout).toMatch(/^unchanged\s+provisioning\.tenant@1/m);
    expect(conflict.stderr).toContain('FLOW_VERSION_CONFLICT');
  }, 120_000);

  it('answers /readyz without a token and /metrics with flow:metrics, and stops gracefully on SIGTERM', async () => {
    expect(await fetch(`${engineUrl}/readyz`).then((r) => r.status)).toBe(200);
    expect(await fetch(`${engineUrl}/metrics`).then((r) => r.status)).toBe(401);
    const scraper = await token({ sub: 'prometheus', envs: ['*'], scope: 'flow:metrics', secret: AUTH_SECRET });
    expect(await fetch(`${engineUrl}/metrics`, { headers: { authorization: `Bearer ${scraper}` } }).then((r) => r.text())).toMatch(/^flow_runnable_instances 0$/m);
    await expect(createFlowClient({ baseUrl: engineUrl, env: ENV }).get('00000000-0000-4000-8000-000000000000')).rejects.toBeInstanceOf(FlowApiError);
    await engine.stop();
    expect(await engine.exited).toEqual({ code: 0, signal: null });
  });
});
