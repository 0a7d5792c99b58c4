import { useState } from 'preact/hooks';
import type { CompatibilityGroup, CompatibilityReport } from '../../contracts/api/compatibility.ts';
import type { VersionDetail, VersionSummary } from '../../contracts/api/logic-versions.ts';
import { get, type Session, post } from '../api.ts';
import type { Claims } from '../scopes.ts';
import { missing } from '../scopes.ts';
import { Guarded, Problem, Short, State, useLoad } from './ui.tsx';

/**
 * The compatibility report (docs/versions.md) of a later published version against the live
 * instances of this one: the API's own report, run by the server on the pure core; the console
 * only picks the candidate and shows the groups.
 */
export function CompatibilityCheck({ session, claims, logicId, version }: { session: Session; claims: Claims | null; logicId: string; version: number }) {
  const { data, error } = useLoad(() => get<{ items: VersionSummary[] }>(session, '/logic-versions'), [session.env, logicId]);
  const later = (data?.items ?? [])
    .filter((v) => v.logicId === logicId && v.version > version)
    .map((v) => v.version)
    .sort((a, b) => a - b);
  const [picked, setPicked] = useState<number | null>(null);
  const [report, setReport] = useState<CompatibilityReport | null>(null);
  const [failure, setFailure] = useState<Error | null>(null);
  const [busy, setBusy] = useState(false);
  const candidate = picked !== null && later.includes(picked) ? picked : (later[0] ?? null);
  const base = `/logic-versions/${encodeURIComponent(logicId)}`;
  const check = async (to: number) => {
    setBusy(true);
    setFailure(null);
    try {
      const detail = await get<VersionDetail>(session, `${base}/${to}`);
      setReport(await post<CompatibilityReport>(session, `${base}/compatibility`, { logicVersion: detail.logicVersion, against: version }));
    } catch (err) {
      setFailure(err as Error);
    } finally {
      setBusy(false);
    }
  };
  return (
    <section class="compat" data-testid="compatibility">
      <h2>Could its live instances move to a later version?</h2>
      <Problem error={error} />
      {data !== null && candidate === null ? (
        <p class="hint">
          No later version of {logicId} is published. Check a candidate before publishing it with <code>s8flow publish --check</code>.
        </p>
      ) : null}
      {candidate !== null ? (
        <p class="compat-pick">
          <label>
            candidate{' '}
            <select aria-label="candidate" value={candidate} onChange={(e) => setPicked(Number((e.target as HTMLSelectElement).value))}>
              {later.map((v) => (
                <option key={v} value={v}>
                  {logicId}@{v}
                </option>
              ))}
            </select>
          </label>{' '}
          <Guarded missing={missing(claims, 'flow:publish', logicId)} disabled={busy} onClick={() => void check(candidate)}>
            Check the live instances of version {version}
          </Guarded>
        </p>
      ) : null}
      <Problem error={failure} />
      {report !== null ? <CompatibilityView report={report} /> : null}
    </section>
  );
}

export function CompatibilityView({ report }: { report: CompatibilityReport }) {
  const from = report.against === null ? null : `${report.logicId}@${report.against.version}`;
  const to = `${report.logicId}@${report.candidate.version}`;
  if (from === null) return <p data-testid="compat-verdict">Nothing to check: no active version below {to}.</p>;
  return (
    <div class="compat-report">
      <p data-testid="compat-verdict">
        <span class={`state ${report.verdict === 'safe' ? 's-completed' : 's-failed'}`}>{report.verdict}</span> {from} → {to}: {report.live} live instance
        {report.live === 1 ? '' : 's'} in {report.groups.length} group{report.groups.length === 1 ? '' : 's'}, {report.unsafe} of them in unsafe groups
        {report.truncated ? ' (more groups exist than were checked, so it cannot be safe)' : ''}.
      </p>
      {report.groups.length > 0 ? (
        <table class="grid compat-groups">
          <thead>
            <tr>
              <th>where</th>
              <th>instances</th>
              <th>verdict</th>
              <th>why</th>
              <th>what would run next on {to}</th>
            </tr>
          </thead>
          <tbody>
            {report.groups.map((g) => (
              <tr key={`${g.state}|${g.currentStep}|${g.generation}|${g.outputs.join()}|${g.compensations.join()}`} data-testid="compat-group" data-step={g.currentStep ?? ''}>
                <td>
                  <State state={g.state} /> at <code>{g.currentStep ?? '—'}</code>
                  {g.generation > 0 ? <small> gen {g.generation}</small> : null}
                  <br />
                  <small>
                    e.g. <a href={`/ui/instances/${g.representative}`}>{<Short id={g.representative} />}</a>
                  </small>
                </td>
                <td class="num">{g.count}</td>
                <td>
                  <span class={`state ${g.verdict === 'safe' ? 's-completed' : 's-failed'}`}>{g.verdict}</span>
                </td>
                <td class="wrap">{why(g)}</td>
                <td class="wrap">{next(g)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      {report.replays ? (
        <p>
          Replayed {report.replays.replayed} ended instance{report.replays.replayed === 1 ? '' : 's'}: {report.replays.same} decided the same, {report.replays.diverged.length}{' '}
          would have diverged.
        </p>
      ) : null}
    </div>
  );
}

function why(g: CompatibilityGroup) {
  if (g.reasons.length === 0) return <span>every step, output and compensation their path reads is there</span>;
  return (
    <ul class="reasons">
      {g.reasons.map((r) => (
        <li key={`${r.code}|${r.step}|${r.readBy ?? ''}`}>
          <code>{r.code}</code> {r.message}
        </li>
      ))}
    </ul>
  );
}

function next(g: CompatibilityGroup) {
  if (g.next === null) return <span>—</span>;
  const steps = g.next.steps.map((s) => `${s.step}${s.compensation ? ' (compensate)' : ''}${s.callsOut ? ' ↗' : ''}`);
  return (
    <span>
      {steps.length === 0 ? 'nothing' : steps.join(' → ')}, then {g.next.stopsAt.state}
      {g.next.stopsAt.step === null ? '' : ` at ${g.next.stopsAt.step}`}
      {g.next.assumes ? <small> (assumes {g.next.assumes})</small> : null}
    </span>
  );
}
