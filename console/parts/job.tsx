import { useEffect, useState } from 'preact/hooks';
import type { BulkJob } from '../../contracts/api/bulk.ts';
import { get, type Session } from '../api.ts';

/**
 * A bulk job (a bulk verb or a migration), re-read every half second while it runs (a job is a
 * short-lived thing; the instance pages use server-sent events instead). `id` null: no job yet.
 */
export function useJob(session: Session, id: string | null): { job: BulkJob | null; error: Error | null; setJob: (j: BulkJob) => void; setError: (e: Error) => void } {
  const [job, setJob] = useState<BulkJob | null>(null);
  const [error, setError] = useState<Error | null>(null);
  useEffect(() => {
    if (id === null) return;
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
  return { job, error, setJob, setError };
}

/** How far a job is: a bar of done over total, with the failures. */
export function JobProgress({ job }: { job: BulkJob }) {
  const pct = job.total === 0 ? 100 : Math.round((job.done / job.total) * 100);
  return (
    <div class="progress" role="progressbar" aria-valuenow={job.done} aria-valuemax={job.total}>
      <div style={{ width: `${pct}%` }} />
      <span data-testid="bulk-progress">
        {job.done} / {job.total} done · {job.failed} failed
      </span>
    </div>
  );
}
