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

/**
 * Streams one instance as server-sent events: a `snapshot`, then an `update` per committed change,
 * woken by the `flow_changes` NOTIFY (no polling on either side). Changes that arrive while an
 * update is being read fold into the next one, so a busy instance costs one read at a time.
 */
export async function streamInstance(
  out: ServerResponse,
  engine: Engine,
  changes: Changes,
  env: string,
  first: LiveSnapshot,
): Promise<() => void> {
  const id = first.record.id;
  const sent = first.record.steps.map(signature);
  let audited = first.audit.length;
  let reading = false;
  let again = false;
  let closed = false;
  const write = (event: string, data: unknown) => {
    if (!closed) out.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  };
  const refresh = async () => {
    if (reading) {
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
  write('snapshot', first);
  const unsubscribe = await changes.subscribe(id, () => void refresh());
  // the snapshot was read before the subscription: catch a change that fell in between
  void refresh();
  // a comment now and then keeps proxies from closing an idle stream
  const keepAlive = setInterval(() => out.write(': keep-alive\n\n'), 15_000).unref();
  return () => {
    closed = true;
    clearInterval(keepAlive);
    void unsubscribe();
  };
}
