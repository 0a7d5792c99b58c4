import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Resolve } from '../../engine/executors/allowlist.ts';
import { httpExecutor } from '../../engine/executors/http.ts';
import type { Attempt } from '../../engine/executors/index.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

/**
 * An allowlisted hostname is checked again by the address it resolves to, and the call connects
 * to that very address: a name that resolves to loopback, a private network or the cloud metadata
 * address is refused unless the allowlist names that address (or a CIDR holding it), and a DNS
 * that answers differently the second time (rebinding) is never asked a second time. Resolution
 * is a hook here, never real DNS; the only traffic is to 127.0.0.1.
 */

const attempt = { input: { a: 1 }, headers: {}, timeoutMs: 5000 } as unknown as Attempt;

describe('allowlisted names are checked by the address they resolve to', () => {
  let svc: FakeService;
  let port: string;
  beforeAll(async () => {
    svc = await new FakeService().on('/x', () => ({ status: 200, body: { ok: true } })).listen();
    port = new URL(svc.url).port;
  });
  afterAll(async () => {
    await svc.close();
  });

  /** A resolver answering `answers` in turn (the last one from then on), counting its calls. */
  const dnsAnswering = (...answers: string[][]) => {
    const asked: string[] = [];
    const resolve: Resolve = async (host) => {
      const addrs = answers[Math.min(asked.length, answers.length - 1)]!;
      asked.push(host);
      return addrs.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
    };
    return { resolve, asked };
  };
  const call = (allowlist: string[], resolve: Resolve, host = 'api.example') =>
    httpExecutor(allowlist, resolve)({ kind: 'http', method: 'POST', url: `http://${host}:${port}/x` }, attempt);
  const received = () => svc.calls('/x').length;

  it('an allowlisted name that resolves to an internal address is refused, and nothing is sent', async () => {
    const before = received();
    for (const internal of [['127.0.0.1'], ['10.1.2.3'], ['169.254.169.254'], ['192.168.0.10'], ['::1'], ['fd00::1'], ['0.0.0.0'], ['::ffff:127.0.0.1'], ['93.184.216.34', '127.0.0.1']]) {
      const { resolve } = dnsAnswering(internal);
      await expect(call(['api.example'], resolve), internal.join()).rejects.toMatchObject({ code: 'FLOW_HTTP_HOST_NOT_ALLOWED' });
    }
    expect(received()).toBe(before);
  });

  it('an internal address the allowlist names, by address or CIDR, is allowed, and the call goes to the checked address only', async () => {
    for (const entry of ['127.0.0.1', '127.0.0.0/8']) {
      // a rebinding DNS: the checked answer first, a different one for any later question
      const { resolve, asked } = dnsAnswering(['127.0.0.1'], ['10.9.9.9']);
      const before = received();
      expect(await call(['api.example', entry], resolve)).toMatchObject({ status: 'succeeded' });
      expect(asked).toEqual(['api.example']);
      expect(received()).toBe(before + 1);
      expect(svc.calls('/x').at(-1)!.headers['host']).toBe(`api.example:${port}`);
    }
  });

  it('localhost may resolve to loopback; an IP literal is not resolved; * allows anything', async () => {
    const local = dnsAnswering(['127.0.0.1']);
    expect(await call(['localhost'], local.resolve, 'localhost')).toMatchObject({ status: 'succeeded' });
    const literal = dnsAnswering(['10.9.9.9']);
    expect(await call(['127.0.0.1'], literal.resolve, '127.0.0.1')).toMatchObject({ status: 'succeeded' });
    expect(literal.asked).toEqual([]);
    const any = dnsAnswering(['127.0.0.1']);
    expect(await call(['*'], any.resolve)).toMatchObject({ status: 'succeeded' });
    // a name off the list is refused before any resolution
    const off = dnsAnswering(['127.0.0.1']);
    await expect(call(['other.example'], off.resolve)).rejects.toMatchObject({ code: 'FLOW_HTTP_HOST_NOT_ALLOWED' });
    expect(off.asked).toEqual([]);
  });

  it('a name that does not resolve is a retryable NETWORK_ERROR, as before', async () => {
    const resolve: Resolve = async () => {
      throw Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' });
    };
    expect(await call(['api.example'], resolve)).toMatchObject({ status: 'failed', retryable: true, error: { code: 'NETWORK_ERROR' } });
  });
});

describeEachDriver('an http step whose allowlisted name resolves to an internal address', (getDb) => {
  it('fails for good with FLOW_HTTP_HOST_NOT_ALLOWED, and the service is never called', async () => {
    const svc = await new FakeService().on('/x', () => ({ status: 200, body: {} })).listen();
    const engine = new Engine({
      db: getDb(),
      env: 'dns-env',
      executors: { httpAllowlist: ['api.example'], resolve: async () => [{ address: '127.0.0.1', family: 4 }] },
    });
    const logic = uniqueLogic({
      start: 'call',
      steps: { call: { kind: 'http', method: 'POST', url: `http://api.example:${new URL(svc.url).port}/x`, retry: { maxAttempts: 3 } } },
    });
    await engine.publish(logic, 'dns-env');
    const { id } = await engine.start({ logicId: logic.logicId, input: {}, env: 'dns-env' });
    await settle(engine);
    const record = await engine.get(id, 'dns-env');
    expect(record.steps.map((s) => [s.step, s.state, s.error?.code])).toEqual([['call', 'failed', 'FLOW_HTTP_HOST_NOT_ALLOWED']]);
    expect(svc.calls('/x')).toEqual([]);
    await engine.close();
    await svc.close();
  });
});
