import { useState } from 'preact/hooks';
import type { BulkPreview } from '../../contracts/api/bulk.ts';
import type { WorkflowSummary } from '../../contracts/api/workflows.ts';
import { get, post } from '../api.ts';
import type { PageProps } from '../main.tsx';
import { navigate } from '../router.ts';
import { missing } from '../scopes.ts';
import { ago, Guarded, Problem, Short, State, useLoad } from '../parts/ui.tsx';


const FILTERS = ['state', 'logicId', 'version', 'correlationId', 'from', 'to'] as const;
const STATES = ['', 'pending', 'processing', 'waiting', 'compensating', 'completed', 'failed', 'compensated', 'cancelled', 'dead_lettered'];

/** The filter as the URL holds it (empty fields dropped): the API's own parameters, `attr.<name>[.op]` included. */
function filterOf(url: URL): Record<string, string> {
  const f: Record<string, string> = {};
  for (const k of FILTERS) {
    const v = url.searchParams.get(k);
    if (v) f[k] = v;
  }
  if (url.searchParams.get('slaBreached') === 'true') f['slaBreached'] = 'true';
  for (const [k, v] of url.searchParams) if (k.startsWith('attr.') && v) f[k] = v;
  return f;
}

/** The search-attribute conditions as typed in the filter box: `accountId=acct-2, amount.gte=100`. */
function attributesText(filter: Record<string, string>): string {
  return Object.entries(filter)
    .filter(([k]) => k.startsWith('attr.'))
    .map(([k, v]) => `${k.slice(5)}=${v}`)
    .join(', ');
}

/** The filter as a bulk job takes it: typed fields, and the attributes as one object. */
function bulkFilter(filter: Record<string, string>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const attributes: Record<string, string> = {};
  for (const [k, v] of Object.entries(filter)) {
    if (k.startsWith('attr.')) attributes[k.slice(5)] = v;
    else if (k === 'version') out[k] = Number(v);
    else if (k === 'slaBreached') out[k] = v === 'true';
    else out[k] = v;
  }
  return Object.keys(attributes).length === 0 ? out : { ...out, attributes };
}

export function InstancesPage({ session, claims, url }: PageProps) {
  const filter = filterOf(url);
  const cursor = url.searchParams.get('cursor');
  const query = new URLSearchParams({ ...filter, limit: '50', ...(cursor ? { cursor } : {}) });
  const { data, error } = useLoad(() => get<{ items: WorkflowSummary[]; nextCursor: string | null }>(session, `/workflows?${query}`), [url.search, session.env]);
  const [jump, setJump] = useState('');

  const apply = (e: Event) => {
    e.preventDefault();
    const form = new FormData(e.target as HTMLFormElement);
    const next = new URLSearchParams();
    for (const k of FILTERS) {
      let v = String(form.get(k) ?? '').trim();
      if (v && (k === 'from' || k === 'to')) v = new Date(v).toISOString();
      if (v) next.set(k, v);
    }
    if (form.get('slaBreached') === 'on') next.set('slaBreached', 'true');
    for (const part of String(form.get('attributes') ?? '').split(',')) {
      const eq = part.indexOf('=');
      if (eq > 0) next.set(`attr.${part.slice(0, eq).trim()}`, part.slice(eq + 1).trim());
    }
    navigate(`/ui/instances?${next}`);
  };
  const local = (iso: string | undefined) => (iso ? new Date(Date.parse(iso) - new Date().getTimezoneOffset() * 60_000).toISOString().slice(0, 16) : '');

  return (
    <main class="page instances">
      <form class="filters" onSubmit={apply}>
        <label>
          state
          <select name="state" value={filter['state'] ?? ''}>
            {STATES.map((s) => (
              <option key={s} value={s}>
                {s || 'any'}
              </option>
            ))}
          </select>
        </label>
        <label>
          definition <input name="logicId" value={filter['logicId'] ?? ''} placeholder="payments.capture" />
        </label>
        <label>
          version <input name="version" value={filter['version'] ?? ''} size={3} />
        </label>
        <label>
          correlation id <input name="correlationId" value={filter['correlationId'] ?? ''} />
        </label>
        <label>
          attributes <input name="attributes" value={attributesText(filter)} placeholder="accountId=acct-2, amount.gte=100" />
        </label>
        <label>
          <input type="checkbox" name="slaBreached" checked={filter['slaBreached'] === 'true'} /> SLA breached
        </label>
        <label>
          created from <input type="datetime-local" name="from" value={local(filter['from'])} />
        </label>
        <label>
          to <input type="datetime-local" name="to" value={local(filter['to'])} />
        </label>
        <button type="submit">Filter</button>
        <span class="jump">
          <input placeholder="instance id" value={jump} onInput={(e) => setJump((e.target as HTMLInputElement).value.trim())} aria-label="instance id" />
          <button type="button" disabled={jump === ''} onClick={() => navigate(`/ui/instances/${jump}`)}>
            Open
          </button>
        </span>
      </form>
      <Problem error={error} />
      {data ? (
        <>
          <table class="grid" data-testid="instances">
            <thead>
              <tr>
                <th>id</th>
                <th>definition</th>
                <th>state</th>
                <th>step</th>
                <th>correlation id</th>
                <th>error</th>
                <th>created</th>
                <th>updated</th>
              </tr>
            </thead>
            <tbody>
              {data.items.map((w) => (
                <tr key={w.id}>
                  <td>
                    <a href={`/ui/instances/${w.id}`}>
                      <Short id={w.id} />
                    </a>
                  </td>
                  <td>
                    {w.logicId}@{w.version}
                  </td>
                  <td>
                    <State state={w.state} />
                  </td>
                  <td>{w.currentStep ?? ''}</td>
                  <td>{w.correlationId ?? ''}</td>
                  <td class="err">{w.error?.code ?? ''}</td>
                  <td>{ago(w.createdAt)}</td>
                  <td>{ago(w.updatedAt)}</td>
                </tr>
              ))}
              {data.items.length === 0 ? (
                <tr>
                  <td colSpan={8}>No instance matches.</td>
                </tr>
              ) : null}
            </tbody>
          </table>
          <p class="paging">
            {cursor ? (
              <button type="button" onClick={() => history.back()}>
                ← previous
              </button>
            ) : null}
            {data.nextCursor ? (
              <a href={`/ui/instances?${new URLSearchParams({ ...filter, cursor: data.nextCursor })}`} class="button">
                next →
              </a>
            ) : null}
          </p>
        </>
      ) : null}
      <Bulk session={session} claims={claims} filter={filter} />
    </main>
  );
}

const BULK = { retry: 'flow:retry', cancel: 'flow:cancel', replay: 'flow:replay' } as const;


/** Bulk actions over the current filter: preview the count and a sample, then run a server-side job. */
function Bulk({ session, claims, filter }: Pick<PageProps, 'session' | 'claims'> & { filter: Record<string, string> }) {
  const [verb, setVerb] = useState<keyof typeof BULK>('retry');
  const [reason, setReason] = useState('');
  const [step, setStep] = useState('');
  const [compensate, setCompensate] = useState(false);
  const [preview, setPreview] = useState<BulkPreview | null>(null);
  const [error, setError] = useState<Error | null>(null);
  const body = (dryRun: boolean) => ({
    filter: bulkFilter(filter),
    reason: reason || 'preview',
    dryRun,
    ...(verb === 'replay' ? { step } : {}),
    ...(verb === 'cancel' ? { compensate } : {}),
  });
  const lack = missing(claims, BULK[verb], filter['logicId']);
  return (
    <section class="bulk" data-testid="bulk">
      <h2>Bulk action on this filter</h2>
      <div class="row">
        <select value={verb} onChange={(e) => {
            setVerb((e.target as HTMLSelectElement).value as keyof typeof BULK);
            setPreview(null);
          }} aria-label="bulk verb">
          <option value="retry">retry</option>
          <option value="cancel">cancel</option>
          <option value="replay">replay from a step</option>
        </select>
        {verb === 'replay' ? <input placeholder="step" value={step} onInput={(e) => setStep((e.target as HTMLInputElement).value)} /> : null}
        {verb === 'cancel' ? (
          <label>
            <input type="checkbox" checked={compensate} onChange={(e) => setCompensate((e.target as HTMLInputElement).checked)} /> compensate
          </label>
        ) : null}
        <Guarded
          missing={lack}
          onClick={() =>
            post<BulkPreview>(session, `/bulk/${verb}`, body(true)).then(
              (p) => {
                setPreview(p);
                setError(null);
              },
              (e) => setError(e),
            )
          }
        >
          Preview
        </Guarded>
      </div>
      <Problem error={error} />
      {preview ? (
        <div class="preview" data-testid="bulk-preview">
          <p>
            <b>{preview.count}</b> instance(s) would get <b>{verb}</b>. First {preview.sample.length}:
          </p>
          <ul class="plain">
            {preview.sample.map((s) => (
              <li key={s.id}>
                <Short id={s.id} /> {s.logicId}@{s.version} <State state={s.state} /> {s.currentStep ?? ''}
              </li>
            ))}
          </ul>
          <label class="reason">
            reason (recorded in every instance's audit)
            <input value={reason} onInput={(e) => setReason((e.target as HTMLInputElement).value)} aria-label="bulk reason" />
          </label>
          <Guarded
            class="danger"
            missing={lack}
            disabled={reason.trim() === '' || preview.count === 0}
            onClick={() =>
              post<{ id: string }>(session, `/bulk/${verb}`, { ...body(false), reason }).then(
                (job) => navigate(`/ui/bulk/${job.id}`),
                (e) => setError(e),
              )
            }
          >
            Run {verb} on {preview.count}
          </Guarded>
        </div>
      ) : null}
    </section>
  );
}
