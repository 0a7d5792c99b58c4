import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { jwtVerify } from 'jose';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const BIN = new URL('../../bin/s8flow.mjs', import.meta.url).pathname;
const SECRET = 'a-development-secret-of-32-chars!!';

const token = (args: string[], env: Record<string, string | undefined> = {}) =>
  run(process.execPath, [BIN, 'token', ...args], { env: { ...process.env, NODE_ENV: 'development', FLOW_AUTH_SECRET: SECRET, ...env } });

describe('s8flow token', () => {
  it('mints an HS256 token with sub, envs, scope and exp, verifiable with FLOW_AUTH_SECRET', async () => {
    const { stdout } = await token(['--sub', 'alice', '--env', 'default', '--env', 'eu', '--scope', 'flow:read  flow:start', '--ttl', '2h']);
    const { payload, protectedHeader } = await jwtVerify(stdout.trim(), new TextEncoder().encode(SECRET), { algorithms: ['HS256'] });
    expect(protectedHeader.alg).toBe('HS256');
    expect(payload).toMatchObject({ sub: 'alice', envs: ['default', 'eu'], scope: 'flow:read flow:start' });
    expect(payload.exp! - payload.iat!).toBe(2 * 3600);
  });

  it.each([
    ['refuses to run in production', ['--sub', 'a', '--env', 'e', '--scope', 'flow:read'], { NODE_ENV: 'production' }, 'CLI_TOKEN_IN_PRODUCTION', 1],
    ['needs FLOW_AUTH_SECRET', ['--sub', 'a', '--env', 'e', '--scope', 'flow:read'], { FLOW_AUTH_SECRET: undefined }, 'CLI_NO_AUTH_SECRET', 1],
    ['needs a scope', ['--sub', 'a', '--env', 'e'], {}, 'CLI_USAGE', 2],
    ['refuses a ttl it cannot read', ['--sub', 'a', '--env', 'e', '--scope', 'flow:read', '--ttl', 'soon'], {}, 'CLI_USAGE', 2],
  ])('%s', async (_name, args, env, code, exit) => {
    const failed = await token(args, env).catch((err: { code: number; stdout: string; stderr: string }) => err);
    expect(failed).toMatchObject({ code: exit, stdout: '', stderr: expect.stringContaining(`[${code}]`) });
  });
});
