import { Writable } from 'node:stream';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type Api, buildApi } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { AUTH_SECRET } from '../api/support.ts';
import { describeEachDriver } from '../support/db.ts';

/**
 * A resume token is a bearer credential for one parked step: it never appears in the request
 * log (info level) nor in a problem's `instance` or `detail`.
 */
describeEachDriver('resume tokens stay out of logs and problems', (getDb) => {
  let engine: Engine;
  let api: Api;
  const lines: string[] = [];
  const TOKEN = 'v1.secret-resume-token-abcdef0123456789.signature';

  beforeAll(async () => {
    engine = new Engine({ db: getDb(), env: 'rt-env', executors: { handlers: new Map() } });
    const stream = new Writable({
      write(chunk, _enc, done) {
        lines.push(String(chunk));
        done();
      },
    });
    api = await buildApi({ engine, auth: { secret: AUTH_SECRET, production: false }, console: false, logger: { level: 'info', stream } });
  });
  afterAll(async () => {
    await api.close();
    await engine.close();
  });

  it('a callback with a bad token answers a problem without the token, and logs none', async () => {
    const res = await api.app.inject({ method: 'POST', url: `/v1/callbacks/${TOKEN}?x=1`, payload: { output: {} } });
    expect(res.json().code).toBe('FLOW_BAD_TOKEN');
    expect(res.json().instance).toBe('/v1/callbacks/{resumeToken}');
    const wrongMethod = await api.app.inject({ method: 'GET', url: `/v1/callbacks/${TOKEN}` });
    expect(wrongMethod.statusCode).toBe(404);
    expect(wrongMethod.body).not.toContain(TOKEN);
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.join('')).toContain('/v1/callbacks/{resumeToken}');
    expect(lines.join('')).not.toContain(TOKEN);
  });
});
