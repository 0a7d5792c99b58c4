import { useState } from 'preact/hooks';
import type { VersionDetail, VersionSummary } from '../../contracts/api/logic-versions.ts';
import type { LogicVersion } from '../../contracts/logic-version.ts';
import { get, patch } from '../api.ts';
import type { PageProps } from '../main.tsx';
import { CompatibilityCheck } from '../parts/compatibility.tsx';
import { Diagram } from '../parts/diagram.tsx';
import { Triggers } from '../parts/triggers.tsx';
import { ago, Guarded, Problem, useLoad } from '../parts/ui.tsx';
import { missing } from '../scopes.ts';

export function VersionsPage({ session }: PageProps) {
  const { data, error } = useLoad(() => get<{ items: VersionSummary[] }>(session, '/logic-versions'), [session.env]);
  return (
    <main class="page versions">
      <Problem error={error} />
      <table class="grid">
        <thead>
          <tr>
            <th>definition</th>
            <th>version</th>
            <th>hash</th>
            <th>status</th>
            <th>published</th>
          </tr>
        </thead>
        <tbody>
          {(data?.items ?? []).map((v) => (
            <tr key={`${v.logicId}@${v.version}`}>
              <td>
                <a href={`/ui/versions/${encodeURIComponent(v.logicId)}/${v.version}`}>{v.logicId}</a>
              </td>
              <td class="num">{v.version}</td>
              <td>
                <code title={v.hash}>{v.hash.slice(7, 19)}…</code>
              </td>
              <td>{v.active ? 'active' : 'retired'}</td>
              <td>{ago(v.publishedAt)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </main>
  );
}

export function VersionPage({ session, claims, params }: PageProps & { params: string[] }) {
  const [logicId, version] = params as [string, string];
  const path = `/logic-versions/${encodeURIComponent(logicId)}/${version}`;
  const { data, error, reload } = useLoad(() => get<VersionDetail>(session, path), [path, session.env]);
  const [failure, setFailure] = useState<Error | null>(null);
  if (error) return <Problem error={error} />;
  if (data === null) return <p class="loading">Loading…</p>;
  return (
    <main class="page version">
      <h1>
        {data.logicId}@{data.version} <span class={`state ${data.active ? 's-completed' : 's-cancelled'}`}>{data.active ? 'active' : 'retired'}</span>
      </h1>
      <dl class="facts">
        <dt>hash</dt>
        <dd>
          <code>{data.hash}</code>
        </dd>
        <dt>source</dt>
        <dd>{(data.logicVersion as Partial<LogicVersion>).source?.file ?? '—'}</dd>
        <dt>in flight</dt>
        <dd data-testid="in-flight">
          <a href={`/ui/instances?logicId=${encodeURIComponent(data.logicId)}&version=${data.version}`}>{data.inFlight}</a>
        </dd>
        <dt>published</dt>
        <dd>{new Date(data.publishedAt).toLocaleString()}</dd>
      </dl>
      {typeof data.logicVersion.description === 'string' ? <p>{data.logicVersion.description}</p> : null}
      <Guarded
        missing={missing(claims, 'flow:publish', data.logicId)}
        class={data.active ? 'danger' : ''}
        onClick={() => patch(session, path, { active: !data.active }).then(reload, setFailure)}
      >
        {data.active ? 'Retire (drain: refuse new starts)' : 'Reactivate'}
      </Guarded>{' '}
      <a class="button" href={`/ui/migrate/${encodeURIComponent(data.logicId)}?from=${data.version}`}>
        Migrate its instances to a later version…
      </a>
      <Problem error={failure} />
      <div class="diagram-box">
        <Diagram mmd={data.diagram} />
      </div>
      <Triggers logic={data.logicVersion as Partial<LogicVersion>} />
      <CompatibilityCheck session={session} claims={claims} logicId={data.logicId} version={data.version} />
    </main>
  );
}
