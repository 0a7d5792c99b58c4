import { useState } from 'preact/hooks';
import type { BulkJob } from '../../contracts/api/bulk.ts';
import type { VersionSummary } from '../../contracts/api/logic-versions.ts';
import type { MigrateRequest, MigrationPreview } from '../../contracts/api/migrations.ts';
import { MAX_MIGRATE_PAGE } from '../../contracts/migrate-limits.ts';
import { get, post, type Session } from '../api.ts';
import type { PageProps } from '../main.tsx';
import { JobProgress, useJob } from '../parts/job.tsx';
import { MigrationPlanView } from '../parts/migration-plan.tsx';
import { Guarded, Problem, Short, useLoad } from '../parts/ui.tsx';
import { missing } from '../scopes.ts';

const STATES = ['', 'pending', 'waiting'];

/** What the operator picked; the URL's `from`, `to`, `state` and `step` fill it in, so a link can name a migration. */
interface Choice {
  from: number | null;
  to: number | null;
  state: string;
  step: string;
  ids: string;
  renames: string;
  /** Move to a retired target too (else the API refuses it, FLOW_MIGRATE_TARGET_RETIRED). */
  allowRetired: boolean;
}

/** `old=new, other=renamed` (commas or lines) as the rename map; anything else is named, not sent. */
function parseRenames(text: string): Record<string, string> | undefined {
  const parts = text.split(/[,\n]/).map((p) => p.trim()).filter((p) => p !== '');
  if (parts.length === 0) return undefined;
  const out: Record<string, string> = {};
  for (const part of parts) {
    const m = /^([^=\s]+)\s*=\s*([^=\s]+)$/.exec(part);
    if (m === null) throw new Error(`the rename “${part}” is not old=new`);
    out[m[1]!] = m[2]!;
  }
  return out;
}

/** The request for the choice: by ids when any are given, else by the filter (within logicId@from). */
function requestOf(logicId: string, c: Choice, reason: string): MigrateRequest {
  const ids = c.ids.split(/[\s,]+/).filter((s) => s !== '');
  const filter = { ...(c.state ? { state: c.state } : {}), ...(c.step.trim() ? { step: c.step.trim() } : {}) };
  const renames = parseRenames(c.renames);
  return {
    logicId,
    fromVersion: c.from!,
    toVersion: c.to!,
    ...(ids.length > 0 ? { ids } : Object.keys(filter).length > 0 ? { filter } : {}),
    ...(renames ? { renames } : {}),
    ...(c.allowRetired ? { allowRetired: true } : {}),
    reason,
  };
}

/**
 * The ids of every instance a dry run of `req` says would move, page by page (the dry run lists
 * one page of its instances at a time; a selection holds at most MAX_MIGRATE).
 */
async function movingIds(session: Session, req: MigrateRequest): Promise<string[]> {
  const ids: string[] = [];
  let after: string | null = null;
  do {
    const p: MigrationPreview = await post<MigrationPreview>(session, '/migrations', { ...req, dryRun: true, pageSize: MAX_MIGRATE_PAGE, ...(after === null ? {} : { after }) });
    ids.push(...p.items.filter((i) => i.refusal === null).map((i) => i.workflowId));
    after = p.nextAfter;
  } while (after !== null);
  return ids;
}

/**
 * Moves instances of one version of a definition to a later one: a dry run through the API first
 * (per group of instances of one shape, and per instance a page at a time: where they land, what
 * runs next under which keys, or why they stay), then the move, a server-side bulk job over the
 * instances a dry run of the same request says would move, followed here.
 */
export function MigratePage({ session, claims, url, params }: PageProps & { params: string[] }) {
  const logicId = params[0]!;
  const { data, error } = useLoad(() => get<{ items: VersionSummary[] }>(session, '/logic-versions'), [session.env]);
  const versions = (data?.items ?? []).filter((v) => v.logicId === logicId).sort((a, b) => a.version - b.version);
  const q = (k: string) => url.searchParams.get(k) ?? '';
  const [choice, setChoice] = useState<Choice>({ from: Number(q('from')) || null, to: Number(q('to')) || null, state: q('state'), step: q('step'), ids: '', renames: '', allowRetired: false });
  const [preview, setPreview] = useState<MigrationPreview | null>(null);
  const [reason, setReason] = useState('');
  const [failure, setFailure] = useState<Error | null>(null);
  const [busy, setBusy] = useState(false);
  const [jobId, setJobId] = useState<string | null>(null);
  const job = useJob(session, jobId);

  // a version with a later one can be the source; the target is any later one (the newest by default)
  const froms = versions.filter((v) => versions.some((w) => w.version > v.version));
  const from = choice.from ?? froms.find((v) => v.inFlight > 0)?.version ?? froms[0]?.version ?? null;
  const tos = versions.filter((v) => from !== null && v.version > from);
  const to = choice.to !== null && tos.some((v) => v.version === choice.to) ? choice.to : (tos.at(-1)?.version ?? null);
  const picked: Choice = { ...choice, from, to };
  const set = (patch: Partial<Choice>) => {
    setChoice({ ...picked, ...patch });
    setPreview(null);
    setJobId(null);
  };
  const lack = missing(claims, 'flow:migrate', logicId);

  const send = async (run: () => Promise<void>) => {
    setBusy(true);
    setFailure(null);
    try {
      await run();
    } catch (err) {
      setFailure(err as Error);
    } finally {
      setBusy(false);
    }
  };
  const dryRun = () =>
    send(async () => {
      setPreview(null);
      setJobId(null);
      setPreview(await post<MigrationPreview>(session, '/migrations', { ...requestOf(logicId, picked, reason.trim() || 'dry run'), dryRun: true }));
    });
  const more = (p: MigrationPreview) =>
    send(async () => {
      const page = await post<MigrationPreview>(session, '/migrations', { ...requestOf(logicId, picked, reason.trim() || 'dry run'), dryRun: true, after: p.nextAfter });
      setPreview({ ...page, items: [...p.items, ...page.items] });
    });
  const apply = () =>
    send(async () => {
      // the instances the dry run says would move, and no others: each is checked again as it moves
      const req = requestOf(logicId, picked, reason.trim());
      const { filter: _filter, ...rest } = req;
      const ids = await movingIds(session, req);
      if (ids.length === 0) throw new Error('no instance of the selection would move now: run the dry run again');
      const started = await post<BulkJob>(session, '/migrations', { ...rest, ids });
      job.setJob(started);
      setJobId(started.id);
    });

  return (
    <main class="page migrate">
      <h1>Migrate instances of {logicId}</h1>
      <Problem error={error} />
      {data !== null && froms.length === 0 ? (
        <p class="hint">
          {logicId} has no two published versions: publish a later one first (<code>s8flow publish</code>).
        </p>
      ) : null}
      {from !== null && to !== null ? (
        <section class="bulk" data-testid="migrate-form">
          <div class="row">
            <label>
              from{' '}
              <select aria-label="from version" value={from} onChange={(e) => set({ from: Number((e.target as HTMLSelectElement).value), to: null })}>
                {froms.map((v) => (
                  <option key={v.version} value={v.version}>
                    @{v.version} ({v.inFlight} in flight{v.active ? '' : ', retired'})
                  </option>
                ))}
              </select>
            </label>
            <label>
              to{' '}
              <select aria-label="to version" value={to} onChange={(e) => set({ to: Number((e.target as HTMLSelectElement).value) })}>
                {tos.map((v) => (
                  <option key={v.version} value={v.version}>
                    @{v.version}
                    {v.active ? '' : ' (retired)'}
                  </option>
                ))}
              </select>
            </label>
            {tos.find((v) => v.version === to)?.active === false ? (
              <label>
                <input
                  type="checkbox"
                  aria-label="allow a retired target"
                  checked={picked.allowRetired}
                  onChange={(e) => set({ allowRetired: (e.target as HTMLInputElement).checked })}
                />{' '}
                allow a retired target
              </label>
            ) : null}
            <label>
              state{' '}
              <select aria-label="state" value={picked.state} onChange={(e) => set({ state: (e.target as HTMLSelectElement).value })}>
                {STATES.map((s) => (
                  <option key={s} value={s}>
                    {s === '' ? 'any live' : s}
                  </option>
                ))}
              </select>
            </label>
            <label>
              at step <input aria-label="step" size={12} value={picked.step} onInput={(e) => set({ step: (e.target as HTMLInputElement).value })} />
            </label>
          </div>
          <div class="row">
            <label class="wide">
              or these instances (ids, comma- or line-separated; they replace the filter)
              <textarea aria-label="ids" rows={2} value={picked.ids} onInput={(e) => set({ ids: (e.target as HTMLTextAreaElement).value })} />
            </label>
            <label class="wide">
              <span>
                renamed steps (<code>old=new</code>, comma-separated)
              </span>
              <input aria-label="renames" value={picked.renames} onInput={(e) => set({ renames: (e.target as HTMLInputElement).value })} />
            </label>
          </div>
          <Guarded missing={lack} disabled={busy} onClick={() => void dryRun()}>
            Dry run
          </Guarded>
        </section>
      ) : null}
      <Problem error={failure} />
      {preview !== null ? (
        <section class="migrate-plan" data-testid="migrate-plan">
          <h2>
            Dry run: {preview.logicId}@{preview.from.version} → @{preview.to.version}
          </h2>
          <MigrationPlanView preview={preview} {...(job.job !== null && job.job.id === jobId ? { results: new Map(job.job.items.map((i) => [i.workflowId, i])) } : {})} />
          {preview.nextAfter !== null ? (
            <button type="button" disabled={busy} onClick={() => void more(preview)}>
              Show more instances ({preview.items.length} of {preview.selected} shown)
            </button>
          ) : null}
          {jobId === null ? (
            <div class="row apply">
              <label class="reason">
                reason (recorded in every moved instance's audit){' '}
                <input aria-label="migrate reason" value={reason} onInput={(e) => setReason((e.target as HTMLInputElement).value)} />
              </label>
              <Guarded class="danger" missing={lack} disabled={busy || reason.trim() === '' || preview.moves === 0} onClick={() => void apply()}>
                Migrate {preview.moves} instance{preview.moves === 1 ? '' : 's'} to @{preview.to.version}
              </Guarded>
            </div>
          ) : null}
        </section>
      ) : null}
      {jobId !== null ? <MigrationJob jobId={jobId} job={job.job} error={job.error} /> : null}
    </main>
  );
}

function MigrationJob({ jobId, job, error }: { jobId: string; job: BulkJob | null; error: Error | null }) {
  return (
    <section class="migrate-job" data-testid="migrate-job" data-state={job?.state ?? 'loading'}>
      <h2>
        Migration job{' '}
        <a href={`/ui/bulk/${jobId}`}>
          <Short id={jobId} />
        </a>{' '}
        {job ? <span class={`state s-${job.state}`}>{job.state}</span> : null}
      </h2>
      <Problem error={error} />
      {job ? (
        <>
          <p>
            by <b>{job.actor}</b> · reason “{job.reason}”
          </p>
          <JobProgress job={job} />
        </>
      ) : (
        <p class="loading">Loading…</p>
      )}
    </section>
  );
}
