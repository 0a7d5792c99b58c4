import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Delivery } from '../../support/idempotency-ledger.ts';
import { waitFor } from '../../support/store-checks.ts';
import { WorkerProcess } from '../../support/worker-process.ts';
import { readDeliveries } from './checks.ts';
import { NetProcess } from './net-process.ts';
import type { Net } from './netns.ts';

/** Short leases and polls, so a takeover is seconds, not minutes. */
export const LEASE_MS = 1500;
export const POLL_MS = 100;
export const SERVICE_PORT = 8080;

/** Why these tests cannot run here, or null. In CI (CI=true) they must not skip: the caller fails instead. */
export function skipReason(unavailable: string | null): string | null {
  if (process.env['FLOW_NETWORK_TESTS'] === 'separate') return 'run on their own, after the main suite (.ci/run)';
  return unavailable;
}

/** The owning service in its namespace, and what it logged. */
export class NetService {
  private constructor(
    readonly proc: NetProcess,
    readonly logFile: string,
    readonly addr: string,
  ) {}

  /** `storeUrl`: where the service asks whether a key's success is committed (a unix socket); none in the bench. */
  static async start(net: Net, node: string, dir: string, storeUrl?: string): Promise<NetService> {
    const logFile = join(dir, 'service.jsonl');
    writeFileSync(logFile, '');
    const { addr } = net.node(node);
    return new NetService(await NetProcess.start(net, node, 'service-main.ts', [addr, String(SERVICE_PORT), logFile], storeUrl === undefined ? {} : { STORE_URL: storeUrl }), logFile, addr);
  }

  /** Where the engine node `name` sends its calls: its own prefix, so each delivery says who sent it. */
  handlerUrl(name: string): string {
    return `http://${this.addr}:${SERVICE_PORT}/${name}`;
  }

  deliveries(): Delivery[] {
    return readDeliveries(this.logFile);
  }

  /** The first delivery matching `match`, once it has arrived. */
  async arrival(what: string, match: (d: Delivery) => boolean, timeoutMs = 30_000): Promise<Delivery> {
    return waitFor(what, async () => this.deliveries().find(match), { timeoutMs, intervalMs: 20 });
  }
}

/** The delay the relay in front of Postgres adds each way (see delay-relay.ts). */
export class Relay {
  private constructor(
    readonly proc: NetProcess,
    readonly file: string,
  ) {}

  static async start(net: Net, node: string, targetNode: string, dir: string): Promise<Relay> {
    const file = join(dir, 'delay-ms');
    writeFileSync(file, '0');
    const args = [net.node(node).addr, '5432', net.node(targetNode).addr, '5432', file];
    return new Relay(await NetProcess.start(net, node, 'delay-relay.ts', args), file);
  }

  /** Sets the round trip the relay adds (half of it each way); applies to bytes arriving from now on. */
  async setRttMs(ms: number): Promise<void> {
    writeFileSync(this.file, String(ms / 2));
    this.proc.signal('SIGHUP');
    await sleep(50);
  }
}

/** An engine node (`s8flow start`, workers only) in its namespace, named for its connections and calls. */
export function startNode(net: Net, name: string, o: { databaseUrl: string; service: NetService; env: string; concurrency?: number; pollMs?: number }): Promise<WorkerProcess> {
  return WorkerProcess.start({
    databaseUrl: o.databaseUrl,
    schema: 'flow',
    env: o.env,
    handlerUrl: o.service.handlerUrl(name),
    concurrency: o.concurrency ?? 8,
    leaseMs: LEASE_MS,
    pollMs: o.pollMs ?? POLL_MS,
    launcher: net.exec(name),
    extraEnv: { PGAPPNAME: `net-${name}`, LOG_LEVEL: 'warn' },
  });
}

export function scratchDir(): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 's8net-run-'));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}
