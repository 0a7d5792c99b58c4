import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
/** Far above the demo's few seconds: a demo that stalls is killed here and fails, not the suite's timeout. */
const DEADLINE_MS = 90_000;

// The README's quick start, `npm run demo`, as a fresh machine runs it: on the embedded store.
// Its owning service completes a parked step through POST /v1/callbacks/{token} one turn of the
// event loop after answering 202, so a worker that defers committing the park lets the
// completion in first, and the instance waits for good.
it('npm run demo runs every payment to its end on the embedded store', async () => {
  const env = { ...process.env };
  delete env['DATABASE_URL'];
  const child = spawn(process.execPath, ['--import', 'tsx', 'examples/demo.ts'], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr.on('data', (b: Buffer) => (err += b.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), DEADLINE_MS);
  const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
  clearTimeout(timer);
  expect({ code, callbackFailures: err.match(/callback failed.*/g) ?? [] }).toEqual({ code: 0, callbackFailures: [] });
  expect(out).toMatch(/pay-risky\s+completed/);
  // payments.capture@3: parked on funds.settled until the ledger's event reached it
  expect(out).toMatch(/delivered: funds\.settled → \S+ \(delivered\)/);
  expect(out).toMatch(/pay-ledger\s+completed/);
  expect(out).toMatch(/completed 4 notifications later through POST \/v1\/callbacks/);
}, DEADLINE_MS + 30_000);
