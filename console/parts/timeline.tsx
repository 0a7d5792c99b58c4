import { useMemo, useState } from 'preact/hooks';
import type { AuditEntrySchema } from '../../contracts/api/workflows.ts';
import { timelineOrder } from '../../contracts/timeline.ts';
import type { StepAttempt } from '../../contracts/record.ts';
import { duration, JsonView } from './ui.tsx';



/** The API's records, by their names in the console. */
export type Attempt = StepAttempt;
export type AuditEntry = AuditEntrySchema;
type Row = { type: 'attempt'; at: string; a: Attempt; index: number } | { type: 'audit'; at: string; e: AuditEntry; index: number };

const ROW = 30;
const HEIGHT = 420;

/**
 * Attempts, compensations and audit entries in one timeline, in time order. Only the rows in view
 * are in the DOM (fixed row height), so 2,000 attempts render and scroll like 20; the selected
 * row's input, output, error and key show beside the list.
 */
export function Timeline({ attempts, audit }: { attempts: Attempt[]; audit: AuditEntry[] }) {
  const rows = useMemo(() => {
    const all: (Row & { audit: boolean })[] = [
      ...attempts.map((a, index) => ({ type: 'attempt' as const, at: a.startedAt, a, index, audit: false })),
      ...audit.map((e, index) => ({ type: 'audit' as const, at: typeof e.at === 'string' ? e.at : String(e.at), e, index, audit: true })),
    ];
    // a verb's audit row before the attempts it caused (contracts/timeline.ts); each kind keeps its order
    return all.sort((x, y) => timelineOrder(x, y) || x.index - y.index);
  }, [attempts, audit]);
  const [top, setTop] = useState(0);
  const [selected, setSelected] = useState<string | null>(null);
  const first = Math.max(0, Math.floor(top / ROW) - 10);
  const last = Math.min(rows.length, Math.ceil((top + HEIGHT) / ROW) + 10);
  const keyOf = (r: Row) => `${r.type}-${r.index}`;
  const chosen = rows.find((r) => keyOf(r) === selected) ?? null;

  return (
    <div class="timeline-wrap">
      <div class="timeline" style={{ height: `${HEIGHT}px` }} onScroll={(e) => setTop((e.target as HTMLElement).scrollTop)} data-testid="timeline" data-rows={rows.length}>
        <div style={{ height: `${rows.length * ROW}px`, position: 'relative' }}>
          {rows.slice(first, last).map((r, i) => {
            const k = keyOf(r);
            const style = { top: `${(first + i) * ROW}px`, height: `${ROW}px` };
            if (r.type === 'audit') {
              return (
                <button type="button" key={k} class={`trow audit ${selected === k ? 'sel' : ''}`} style={style} onClick={() => setSelected(k)} data-testid="audit-row">
                  <time>{new Date(r.at).toLocaleTimeString()}</time>
                  <span class="tkind">audit</span>
                  <b>{r.e.verb}</b>
                  <span>by {r.e.actor}</span>
                  <span class="reason">{r.e.reason ?? ''}</span>
                </button>
              );
            }
            const a = r.a;
            const ms = a.finishedAt ? Date.parse(a.finishedAt) - Date.parse(a.startedAt) : null;
            return (
              <button
                type="button"
                key={k}
                class={`trow t-${a.state} ${a.kind === 'compensation' ? 'comp' : ''} ${selected === k ? 'sel' : ''}`}
                style={style}
                onClick={() => setSelected(k)}
                data-testid="attempt-row"
                data-step={a.step}
                data-state={a.state}
              >
                <time>{new Date(a.startedAt).toLocaleTimeString()}</time>
                <span class="tkind">{a.kind === 'compensation' ? 'undo' : 'step'}</span>
                <b>{a.step}</b>
                <span>
                  #{a.attempt} g{a.generation}
                </span>
                <span class={`state s-${a.state}`}>{a.state}</span>
                <span>{ms === null ? '…' : duration(ms)}</span>
                <span class="err">{a.error?.code ?? ''}</span>
              </button>
            );
          })}
        </div>
      </div>
      <aside class="detail" data-testid="timeline-detail">
        {chosen === null ? <p>Select a row for its input, output, error and key.</p> : null}
        {chosen?.type === 'attempt' ? (
          <>
            <h4>
              {chosen.a.kind === 'compensation' ? 'compensation of ' : ''}
              {chosen.a.step} #{chosen.a.attempt} (generation {chosen.a.generation})
            </h4>
            <p>
              idempotency key <code>{chosen.a.idempotencyKey ?? '—'}</code>
            </p>
            <p>
              {chosen.a.startedAt} → {chosen.a.finishedAt ?? 'running'}
            </p>
            <h5>input</h5>
            <JsonView value={chosen.a.input} />
            <h5>output</h5>
            <JsonView value={chosen.a.output} />
            {chosen.a.error ? (
              <>
                <h5>error</h5>
                <JsonView value={chosen.a.error} />
              </>
            ) : null}
          </>
        ) : null}
        {chosen?.type === 'audit' ? (
          <>
            <h4>
              {chosen.e.verb} by {chosen.e.actor}
            </h4>
            <p>{chosen.e.at}</p>
            <p>reason: {chosen.e.reason ?? '—'}</p>
            <h5>arguments</h5>
            <JsonView value={chosen.e.args} />
          </>
        ) : null}
      </aside>
    </div>
  );
}
