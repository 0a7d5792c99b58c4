import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * The outbox signature scheme (docs/outbox.md): `X-Flow-Signature: sha256=<hex>` where hex is
 * HMAC-SHA256, keyed with the relay secret, of `<X-Flow-Timestamp>.<exact request body>`. The
 * timestamp (unix seconds) is signed so a receiver can refuse a captured request replayed later.
 */
export function signOutbox(secret: string, timestamp: number, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;
}

/**
 * For receivers written in TypeScript: true when `signature` signs `body` at `timestamp` and the
 * timestamp is within `toleranceSec` of `nowSec`. Compares in constant time.
 */
export function verifyOutbox(
  secret: string,
  args: { timestamp: string | undefined; signature: string | undefined; body: string },
  opts: { nowSec?: number; toleranceSec?: number } = {},
): boolean {
  const ts = Number(args.timestamp);
  if (!Number.isInteger(ts) || args.signature === undefined) return false;
  const now = opts.nowSec ?? Math.floor(Date.now() / 1000);
  if (Math.abs(now - ts) > (opts.toleranceSec ?? 300)) return false;
  const expected = Buffer.from(signOutbox(secret, ts, args.body));
  const given = Buffer.from(args.signature);
  return expected.length === given.length && timingSafeEqual(expected, given);
}
