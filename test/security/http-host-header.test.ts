import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LogicVersionInvalid, parseLogicVersion } from '../../contracts/index.ts';
import type { Attempt } from '../../engine/executors/index.ts';
import { httpExecutor } from '../../engine/executors/http.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { FakeService } from '../support/fake-service.ts';

/**
 * An `http` step cannot choose the transport's or the engine's headers: `Host` would reach a
 * virtual host the allowlist never named, and `Idempotency-Key` or `X-Flow-*` would forge what
 * the owning service trusts. Refused at publish; dropped at execution for versions already stored.
 */

const RESERVED = { Host: 'internal-admin.example', 'content-length': '0', Connection: 'close', 'Transfer-Encoding': 'chunked', 'Idempotency-Key': 'forged', 'X-Flow-Workflow-Id': 'forged', 'X-Flow-Approved-By': 'ceo' };

const withHeaders = (headers: Record<string, string>, compensate = false) =>
  makeLogic({
    logicId: 'hh.call',
    start: 'call',
    steps: {
      call: compensate
        ? { kind: 'http', method: 'POST', url: 'http://127.0.0.1/x', compensate: { kind: 'http', method: 'POST', url: 'http://127.0.0.1/undo', headers } }
        : { kind: 'http', method: 'POST', url: 'http://127.0.0.1/x', headers },
    },
  });

describe('an http step cannot set Host or the engine\'s contract headers', () => {
  let svc: FakeService;
  beforeAll(async () => {
    svc = await new FakeService().on('/x', () => ({ status: 200, body: { ok: true } })).listen();
  });
  afterAll(async () => {
    await svc.close();
  });

  it('publish refuses each reserved header, on a step and on its compensation, with FLOW_LV_RESERVED_HEADER', () => {
    for (const compensate of [false, true]) {
      for (const [name, value] of Object.entries(RESERVED)) {
        let err: unknown;
        try {
          parseLogicVersion(withHeaders({ [name]: value }, compensate));
        } catch (e) {
          err = e;
        }
        expect(err, name).toBeInstanceOf(LogicVersionInvalid);
        expect((err as LogicVersionInvalid).details, name).toContainEqual(expect.objectContaining({ code: 'FLOW_LV_RESERVED_HEADER' }));
      }
    }
    // ordinary headers still publish
    expect(() => parseLogicVersion(withHeaders({ 'X-Request-Source': 'flow', Accept: 'application/json' }))).not.toThrow();
  });

  it('a stored version that sets them is called with the real Host and the engine\'s own headers', async () => {
    const url = `${svc.url}/x`;
    const host = new URL(url).host;
    const exec = httpExecutor([new URL(url).hostname]);
    const def = { kind: 'http' as const, method: 'POST' as const, url, headers: { ...RESERVED, 'X-Request-Source': 'flow' } };
    const attempt = {
      input: { a: 1 },
      headers: { 'idempotency-key': 'real-key', 'x-flow-workflow-id': 'real-id' },
      timeoutMs: 5000,
    } as unknown as Attempt;
    const outcome = await exec(def, attempt);
    expect(outcome).toMatchObject({ status: 'succeeded' });
    const got = svc.calls('/x').at(-1)!.headers;
    expect(got['host']).toBe(host);
    expect(got['idempotency-key']).toBe('real-key');
    expect(got['x-flow-workflow-id']).toBe('real-id');
    expect(got['x-flow-approved-by']).toBeUndefined();
    expect(got['content-length']).toBe(String(Buffer.byteLength(JSON.stringify({ a: 1 }))));
    expect(got['x-request-source']).toBe('flow');
  });
});
