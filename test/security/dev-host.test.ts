import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type Api, buildApi } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { AUTH_SECRET } from '../api/support.ts';
import { describeEachDriver } from '../support/db.ts';

/**
 * `s8flow dev` hands its admin token to the console only on a page loaded from loopback, by name
 * or address, on the port it listens on. A DNS-rebound name (evil.example resolving to 127.0.0.1)
 * reaches the same socket, and gets the sign-in page without the token.
 */
describeEachDriver('the development token and the Host header', (getDb) => {
  let engine: Engine;
  let api: Api;
  let port: number;

  beforeAll(async () => {
    engine = new Engine({ db: getDb(), env: 'dev-env', executors: { handlers: new Map() } });
    api = await buildApi({ engine, auth: { secret: AUTH_SECRET, production: false }, console: { devToken: async () => 'ey-the-dev-token' } });
    await api.app.listen({ host: '127.0.0.1', port: 0 });
    port = (api.app.server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    await api.close();
    await engine.close();
  });

  /** GET over loopback with the Host header a browser would send for the page's URL. */
  const get = (path: string, host: string) =>
    new Promise<string>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path, headers: { host } }, (res) => {
        let body = '';
        res.on('data', (c) => {
          body += c;
        });
        res.on('end', () => resolve(body));
      });
      req.on('error', reject);
      req.end();
    });

  it('serves the token to localhost, 127.0.0.1 and [::1] on its port', async () => {
    for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, `LOCALHOST:${port}`]) {
      expect(await get('/ui/config.json', host), host).toContain('ey-the-dev-token');
    }
  });

  it('never to another name or another port', async () => {
    for (const host of [`evil.example:${port}`, 'evil.example', `localhost:${port + 1}`, 'localhost', `127.0.0.1.evil.example:${port}`]) {
      expect(await get('/ui/config.json', host), host).not.toContain('ey-the-dev-token');
      expect(await get('/ui/', host), host).not.toContain('ey-the-dev-token');
    }
  });
});
