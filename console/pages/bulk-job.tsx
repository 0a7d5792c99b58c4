import type { BulkJob } from '../../contracts/api/bulk.ts';
import { post } from '../api.ts';
import type { PageProps } from '../main.tsx';
import { JobProgress, useJob } from '../parts/job.tsx';
import { Guarded, Problem, Short, State } from '../parts/ui.tsx';
import { missing } from '../scopes.ts';

/** A bulk job's progress and per-instance results, followed while it runs. */
export function BulkJobPage({ session, claims, params }: PageProps & { params: string[] }) {
  const { job, error, setJob, setError } = useJob(session, params[0]!);
  if (error) return <Problem error={error} />;
  if (job === null) return <p class="loading">Loading…</p>;
  return (
    <main class="page bulk-job" data-testid="bulk-job" data-state={job.state}>
      <h1>
        Bulk {job.verb} <Short id={job.id} /> <span class={`state s-${job.state}`}>{job.state}</span>
      </h1>
      <p>
        by <b>{job.actor}</b> · reason “{job.reason}” · filter <code>{JSON.stringify(job.filter)}</code>
      </p>
      <JobProgress job={job} />
      {job.state === 'running' ? (
        <Guarded
          missing={missing(claims, `flow:${job.verb}`, job.filter.logicId)}
          class="danger"
          onClick={() => post<BulkJob>(session, `/bulk/${job.id}/abort`, {}).then(setJob, setError)}
        >
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
