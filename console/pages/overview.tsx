import type { ListedInstance, Overview, PausedHandler } from '../../contracts/api/overview.ts';
import { get } from '../api.ts';
import type { PageProps } from '../main.tsx';
import { ago, duration, Problem, Short, State, useLoad } from '../parts/ui.tsx';

type Listed = ListedInstance;

const STATES = ['pending', 'processing', 'waiting', 'compensating', 'completed', 'failed', 'compensated', 'cancelled', 'dead_lettered'];

const list = (state: string, logicId: string, version: number) => `/ui/instances?state=${state}&logicId=${encodeURIComponent(logicId)}&version=${version}`;

export function OverviewPage({ session }: PageProps) {
  const { data, error } = useLoad(() => get<Overview>(session, '/overview'), [session.env, session.token]);
  if (error) return <Problem error={error} />;
  if (data === null) return <p class="loading">Loading…</p>;
  const rows = new Map<string, Map<string, number>>();
  for (const c of data.counts) {
    const key = `${c.logicId}@${c.version}`;
    rows.set(key, (rows.get(key) ?? new Map()).set(c.state, c.count));
  }
  return (
    <main class="page overview">
      <section class="cards">
        <div class="card">
          <b data-testid="queue-depth">{data.queueDepth}</b> runnable now
        </div>
        <div class="card">
          <b>{data.queueDepth === 0 ? '—' : duration(data.oldestRunnableMs)}</b> oldest runnable waited
        </div>
        <div class="card">
          <b>{data.deadLettered.length}</b> dead-lettered
        </div>
        <div class="card">
          <b>{data.stuck.length}</b> stuck
        </div>
        <div class="card">
          <b>{data.decisions.length}</b> decisions waiting
        </div>
        <div class="card">
          <b data-testid="sla-breaches">
            <a href="/ui/instances?slaBreached=true">{data.slaBreaches.count}</a>
          </b>{' '}
          SLA breaches
        </div>
      </section>

      {data.pausedHandlers.length > 0 ? <Paused handlers={data.pausedHandlers} /> : null}

      <h2>Instances by state</h2>
      <table class="grid">
        <thead>
          <tr>
            <th>definition</th>
            {STATES.map((s) => (
              <th key={s}>
                <State state={s} />
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {[...rows].map(([key, counts]) => {
            const [logicId, version] = key.split('@') as [string, string];
            return (
              <tr key={key}>
                <td>
                  <a href={`/ui/versions/${encodeURIComponent(logicId)}/${version}`}>{key}</a>
                </td>
                {STATES.map((s) => (
                  <td key={s} class="num">
                    {counts.get(s) ? <a href={list(s, logicId, Number(version))}>{counts.get(s)}</a> : ''}
                  </td>
                ))}
              </tr>
            );
          })}
          {rows.size === 0 ? (
            <tr>
              <td colSpan={STATES.length + 1}>No instances yet.</td>
            </tr>
          ) : null}
        </tbody>
      </table>

      <Limits limits={data.limits ?? []} />

      <div class="columns">
        <section>
          <h2>Stuck</h2>
          <Listing items={data.stuck} empty="Nothing is stuck." />
        </section>
        <section>
          <h2>Dead letters</h2>
          <Listing items={data.deadLettered} empty="No dead letters." />
        </section>
        <section>
          <h2>Decisions waiting</h2>
          <ul class="plain">
            {data.decisions.map((d) => (
              <li key={d.id}>
                <a href={`/ui/instances/${d.id}`}>
                  <Short id={d.id} />
                </a>{' '}
                {d.logicId}@{d.version} · <b>{d.step}</b> · {d.correlationId ?? ''} · {ago(d.since)}
              </li>
            ))}
            {data.decisions.length === 0 ? <li>None.</li> : null}
          </ul>
        </section>
        <section>
          <h2>SLA breaches</h2>
          <ul class="plain" data-testid="sla-breach-list">
            {data.slaBreaches.recent.map((b) => (
              <li key={`${b.id}-${b.step ?? ''}`}>
                <a href={`/ui/instances/${b.id}`}>
                  <Short id={b.id} />
                </a>{' '}
                {b.logicId} · {b.step ?? 'whole instance'} · within {b.within} · {ago(b.breachedAt)}
              </li>
            ))}
            {data.slaBreaches.recent.length === 0 ? <li>None.</li> : null}
          </ul>
        </section>
      </div>
    </main>
  );
}

function Listing({ items, empty }: { items: Listed[]; empty: string }) {
  if (items.length === 0) return <p>{empty}</p>;
  return (
    <ul class="plain">
      {items.map((i) => (
        <li key={`${i.id}-${i.reason}`}>
          <a href={`/ui/instances/${i.id}`}>
            <Short id={i.id} />
          </a>{' '}
          {i.logicId}@{i.version} · {i.currentStep ?? '—'} · <span class="reason">{i.reason.replace(/_/g, ' ')}</span>
          {i.error ? <span class="err"> · {i.error.code}</span> : null} · {ago(i.updatedAt)}
        </li>
      ))}
    </ul>
  );
}

/** The limits on this env's calls: what each allows, what holds a permit now, what waits (and the instances waiting, in the API). */
function Limits({ limits }: { limits: NonNullable<Overview['limits']> }) {
  if (limits.length === 0) return null;
  return (
    <section>
      <h2>Limits</h2>
      <table class="grid" data-testid="limits">
        <thead>
          <tr>
            <th>resource</th>
            <th>scope</th>
            <th>in flight</th>
            <th>waiting</th>
            <th>concurrency</th>
            <th>rate /s (burst)</th>
            <th>from</th>
          </tr>
        </thead>
        <tbody>
          {limits.map((l) => (
            <tr key={`${l.scope} ${l.resource}`}>
              <td>{l.resource}</td>
              <td>{l.scope === '*' ? 'every env' : l.scope}</td>
              <td class="num">{l.inFlight}</td>
              <td class="num">{l.waiting}</td>
              <td class="num">{l.concurrency ?? '—'}</td>
              <td class="num">{l.rate === null ? '—' : `${l.rate} (${l.burst ?? 1})`}</td>
              <td>{l.source === 'override' ? `set by ${l.updatedBy ?? '?'}` : l.source}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

/** Handlers whose calls wait: the instances calling them are held without using attempts. */
function Paused({ handlers }: { handlers: PausedHandler[] }) {
  return (
    <section data-testid="paused-handlers">
      <h2>Paused handlers</h2>
      <ul class="plain">
        {handlers.map((h) => (
          <li key={h.handler}>
            <b>{h.handler}</b> · <span class="reason">{h.reason.replace(/_/g, ' ')}</span> after {h.failures} failures
            {h.lastError ? <span class="err"> · {h.lastError}</span> : null}
            {h.openUntil ? <> · paused until {new Date(h.openUntil).toLocaleTimeString()}</> : null}
          </li>
        ))}
      </ul>
    </section>
  );
}
