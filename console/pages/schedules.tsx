import { useState } from 'preact/hooks';
import type { Schedule } from '../../contracts/api/schedules.ts';
import { get, post } from '../api.ts';
import type { PageProps } from '../main.tsx';
import { Guarded, Problem, useLoad } from '../parts/ui.tsx';
import { missing } from '../scopes.ts';

/** Every schedule of the env with its next tick; pause, resume and trigger need `flow:start` for the definition. */
export function SchedulesPage({ session, claims }: PageProps) {
  const { data, error, reload } = useLoad(() => get<{ items: Schedule[] }>(session, '/schedules'), [session.env]);
  const [failure, setFailure] = useState<Error | null>(null);
  const [started, setStarted] = useState<{ id: string; workflowId: string } | null>(null);
  const act = (id: string, verb: 'pause' | 'resume' | 'trigger') =>
    post<{ workflowId?: string }>(session, `/schedules/${encodeURIComponent(id)}/${verb}`, { reason: `console ${verb}` }).then((r) => {
      setFailure(null);
      if (verb === 'trigger' && r.workflowId !== undefined) setStarted({ id, workflowId: r.workflowId });
      reload();
    }, setFailure);
  return (
    <main class="page schedules">
      <Problem error={error} />
      <Problem error={failure} />
      {started === null ? null : (
        <p class="notice" data-testid="triggered">
          {started.id} started <a href={`/ui/instances/${started.workflowId}`}>{started.workflowId}</a>
        </p>
      )}
      <table class="grid">
        <thead>
          <tr>
            <th>schedule</th>
            <th>definition</th>
            <th>cron</th>
            <th>zone</th>
            <th>overlap</th>
            <th>next tick</th>
            <th>status</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {(data?.items ?? []).map((s) => {
            const blocked = missing(claims, 'flow:start', s.logicId);
            return (
              <tr key={s.id} data-schedule={s.id}>
                <td>
                  {s.id} {s.origin === 'declared' ? <small>(declared)</small> : null}
                </td>
                <td>
                  <a href={`/ui/instances?logicId=${encodeURIComponent(s.logicId)}`}>{s.logicId}</a>
                </td>
                <td>
                  <code>{s.cron}</code>
                </td>
                <td>{s.timezone}</td>
                <td>{s.overlap}</td>
                <td>{s.nextAt === null ? '—' : new Date(s.nextAt).toLocaleString()}</td>
                <td>{s.paused ? 'paused' : 'active'}</td>
                <td>
                  <Guarded missing={blocked} onClick={() => act(s.id, s.paused ? 'resume' : 'pause')}>
                    {s.paused ? 'Resume' : 'Pause'}
                  </Guarded>{' '}
                  <Guarded missing={blocked} onClick={() => act(s.id, 'trigger')}>
                    Trigger now
                  </Guarded>
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
      {data !== null && data.items.length === 0 ? <p>No schedules in this env: declare one with <code>.schedule()</code>, or create one with <code>s8flow schedules create</code>.</p> : null}
    </main>
  );
}
