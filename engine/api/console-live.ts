import type { ServerResponse } from 'node:http';
import type { StepAttempt, WorkflowRecord } from '../../contracts/index.ts';
import type { Changes } from '../runtime/changes.ts';
import type { Engine } from '../runtime/engine.ts';

/** What the instance page is first sent: everything it shows. */
export interface LiveSnapshot {
  record: WorkflowRecord;
  audit: unknown[];
  logic: unknown;
  mmd: string | null;
}

/** What it is sent after a change: the record without attempts, the attempts that changed (by index), the audit when it grew. */
export interface LiveUpdate {
  record: Omit<WorkflowRecord, 'steps'>;
  steps: [number, StepAttempt][];
  audit?: unknown[];
}

const signature = (a: StepAttempt) => `${a.state}|${a.finishedAt}|${a.generation}`;

/** The longest a Node timer holds (2^31 - 1 ms); a later expiry is reached in steps. */
const MAX_TIMER_MS = 2_147_483_647;

export interface StreamOptions {
  /** When the caller's token expires (ms since the epoch): the stream ends then with an `expired` event. */
  until?: number | undefined;
}

/**
 * Streams one instance as server-sent events: a `snapshot`, then an `update` per committed change,
 * woken by the `flow_changes` NOTIFY (no polling on either side). Changes that arrive while an
 * update is being read fold into the next one, so a busy instance costs one read at a time.
 *
 * The stream owns its end: when `out` closes — even while the subscription is still being
 * registered — or the token expires, the subscription is let go. A subscription left behind is
 * renewed in `change_watchers` and read on every change of the instance, for ever.
 */
export async function streamInstance(
  out: ServerResponse,
  engine: Engine,
  changes: Changes,
  env: string,
  first: LiveSnapshot,
  opts: StreamOptions = {},
): Promise<void> {
  const id = first.record.id;
  const sent = first.record.steps.map(signature);
  let audited = first.audit.length;
  let reading = false;
  let again = false;
  let closed = false;
  let unsubscribe: (() => Promise<void>) | null = null;
  let keepAlive: NodeJS.Timeout | undefined;
  let expiry: NodeJS.Timeout | undefined;
  const write = (event: string, data: unknown) => {
    if (!closed) out.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  };
  const stop = () => {
    if (closed) return;
    closed = true;
    clearInterval(keepAlive);
    clearTimeout(expiry);
    if (unsubscribe !== null) void unsubscribe();
  };
  out.once('close', stop);
  const refresh = async () => {
    if (reading || closed) {
      again = true;
      return;
    }
    reading = true;
    try {
      do {
        again = false;
        const record = await engine.get(id, env);
        const steps: [number, StepAttempt][] = [];
        record.steps.forEach((a, i) => {
          const s = signature(a);
          if (sent[i] !== s) {
            sent[i] = s;
            steps.push([i, a]);
          }
        });
        const audit = await engine.ops.audit(id, { env });
        const { steps: _all, ...header } = record;
        const update: LiveUpdate = { record: header, steps };
        if (audit.length !== audited) {
          audited = audit.length;
          update.audit = audit;
        }
        write('update', update);
      } while (again && !closed);
    } catch (err) {
      write('problem', { message: (err as Error).message });
    } finally {
      reading = false;
    }
  };
  const until = opts.until;
  if (until !== undefined) {
    const expire = () => {
      write('expired', { message: 'the token expired: reconnect with a fresh one' });
      stop();
      out.end();
    };
    const arm = () => {
      const left = until - Date.now();
      if (left <= 0) expire();
      else expiry = setTimeout(arm, Math.min(left, MAX_TIMER_MS)).unref();
    };
    arm();
  }
  write('snapshot', first);
  const leave = await changes.subscribe(id, () => void refresh());
  // the client left (or the token expired) while the subscription was being registered
  if (closed) {
    void leave();
    return;
  }
  unsubscribe = leave;
  // the snapshot was read before the subscription: catch a change that fell in between
  void refresh();
  // a comment now and then keeps proxies from closing an idle stream
  keepAlive = setInterval(() => {
    if (!closed) out.write(': keep-alive\n\n');
  }, 15_000).unref();
}
