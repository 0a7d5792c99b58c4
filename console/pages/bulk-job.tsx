import { useEffect, useState } from 'preact/hooks';
import type { BulkJob } from '../../contracts/api/bulk.ts';
import { get, post } from '../api.ts';
import type { PageProps } from '../main.tsx';
import { missing } from '../scopes.ts';
import { Guarded, Problem, Short, State } from '../parts/ui.tsx';


/**
 * A bulk job's progress and per-instance results. While it runs the page re-reads the job every
 * half second (a job is a short-lived thing; the instance pages use server-sent events instead).
 */
export function BulkJobPage({ session, claims, params }: PageProps & { params: string[] }) {
  const id = params[0]!;
  const [job, setJob] = useState<BulkJob | null>(null);
  const [error, setError] = useState<Error | null>(null);
  useEffect(() => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    let live = true;
    const load = () =>
      get<BulkJob>(session, `/bulk/${id}`).then(
        (j) => {
          if (!live) return;
          setJob(j);
          if (j.state === 'running') timer = setTimeout(load, 500);
        },
        (e) => live && setError(e),
      );
    load();
    return () => {
      live = false;
      clearTimeout(timer);
    };
  }, [id, session.env]);
  if (error) return <Problem error={error} />;
  if (job === null) return <p class="loading">Loading…</p>;
  const pct = job.total === 0 ? 100 : Math.round((job.done / job.total) * 100);
  return (
    <main class="page bulk-job" data-testid="bulk-job" data-state={job.state}>
      <h1>
        Bulk {job.verb} <Short id={job.id} /> <span class={`state s-${job.state}`}>{job.state}</span>
      </h1>
      <p>
        by <b>{job.actor}</b> · reason “{job.reason}” · filter <code>{JSON.stringify(job.filter)}</code>
      </p>
      <div class="progress" role="progressbar" aria-valuenow={job.done} aria-valuemax={job.total}>
        <div style={{ width: `${pct}%` }} />
        <span data-testid="bulk-progress">
          {job.done} / {job.total} done · {job.failed} failed
        </span>
      </div>
      {job.state === 'running' ? (
        <Guarded missing={missing(claims, `flow:${job.verb}`)} class="danger" onClick={() => post<BulkJob>(session, `/bulk/${job.id}/abort`, {}).then(setJob, setError)}>
          Abort
        </Guarded>
      ) : null}
      <table class="grid" data-testid="bulk-items">
        <thead>
          <tr>
            <th>instance</th>
            <th>result</th>
            <th>state after</th>
            <th>error</th>
          </tr>
        </thead>
        <tbody>
          {job.items.map((i) => (
            <tr key={i.workflowId} class={`item-${i.status}`}>
              <td>
                <a href={`/ui/instances/${i.workflowId}`}>
                  <Short id={i.workflowId} />
                </a>
              </td>
              <td>{i.status}</td>
              <td>{i.state ? <State state={i.state} /> : ''}</td>
              <td class="err">{i.error ? `${i.error.code}: ${i.error.message}` : ''}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </main>
  );
}
