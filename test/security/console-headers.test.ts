import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Api } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { bearer, testApi } from '../api/support.ts';
import { describeEachDriver } from '../support/db.ts';

/**
 * The console and the API answer with a CSP that allows only the engine's own script, refuse to be
 * framed, and forbid content sniffing; the console keeps its token for the tab (sessionStorage),
 * not in localStorage where every later visitor of the browser profile finds it.
 */
describeEachDriver('the console and API security headers', (getDb) => {
  let engine: Engine;
  let api: Api;

  beforeAll(async () => {
    engine = new Engine({ db: getDb(), env: 'hdr-env', executors: { handlers: new Map() } });
    api = await testApi(engine);
  });
  afterAll(async () => {
    await api.close();
    await engine.close();
  });

  it('every console page, asset and API answer carries nosniff, no framing and a CSP', async () => {
    const auth = await bearer({ envs: ['hdr-env'], scope: 'flow:read' });
    for (const [url, headers] of [
      ['/ui/', {}],
      ['/ui/instances/x', {}],
      ['/ui/assets/console.js', {}],
      ['/v1/envs/hdr-env/workflows', auth],
      ['/v1/envs/hdr-env/workflows', {}],
    ] as const) {
      const res = await api.app.inject({ url, headers });
      expect(res.headers['x-content-type-options'], url).toBe('nosniff');
      expect(res.headers['x-frame-options'], url).toBe('DENY');
      const csp = String(res.headers['content-security-policy']);
      expect(csp, url).toContain("frame-ancestors 'none'");
      expect(csp, url).toContain("script-src 'self'");
      expect(csp, url).toContain("object-src 'none'");
      expect(csp, url).not.toContain('unsafe-eval');
    }
  });

  it('a /live stream, written by its route itself, carries them too', async () => {
    await engine.publish(makeLogic({ logicId: 'hdr.asks', start: 'approve', steps: { approve: { kind: 'decision', options: ['yes', 'no'] } } }));
    const { id } = await engine.start({ logicId: 'hdr.asks', input: {} });
    const base = await api.app.listen({ host: '127.0.0.1', port: 0 });
    const aborted = new AbortController();
    const res = await fetch(`${base}/v1/envs/hdr-env/workflows/${id}/live`, { headers: await bearer({ envs: ['hdr-env'], scope: 'flow:read' }), signal: aborted.signal });
    aborted.abort();
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    expect(res.headers.get('x-frame-options')).toBe('DENY');
    expect(res.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
  });

  it('the console bundle keeps its token in sessionStorage', async () => {
    const js = (await api.app.inject({ url: '/ui/assets/console.js' })).body;
    // booleans: a failure must not print the whole bundle
    expect(js.includes('sessionStorage.getItem("flow.token")')).toBe(true);
    expect(/localStorage\.(getItem|setItem|removeItem)\("flow\.token"/.test(js)).toBe(false);
  });
});
