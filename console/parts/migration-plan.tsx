import type { BulkItem } from '../../contracts/api/bulk.ts';
import type { MigrationGroup, MigrationPlan, MigrationPreview } from '../../contracts/api/migrations.ts';
import { Short, State } from './ui.tsx';

/**
 * A migration's dry run (docs/versions.md, "Migrating instances"): per group of instances of one
 * shape how many, where they land or why they stay; then per instance of the pages loaded where
 * it is, where it would land or why it stays, the attempt under way it keeps, and what would run
 * next on the target under which idempotency keys. With `results` (the job's items), what the
 * move did.
 */
export function MigrationPlanView({ preview, results }: { preview: MigrationPreview; results?: Map<string, BulkItem> }) {
  const to = `@${preview.to.version}`;
  const renames = Object.entries(preview.renames);
  return (
    <div class="plan">
      <p data-testid="plan-summary">
        {preview.logicId}@{preview.from.version} → {to}: {preview.selected} selected, {preview.moves} would move, {preview.refused} refused
        {renames.length > 0 ? `, steps renamed ${renames.map(([a, b]) => `${a} → ${b}`).join(', ')}` : ''}.
      </p>
      {preview.groups.length > 0 ? (
        <table class="grid" data-testid="plan-groups">
          <thead>
            <tr>
              <th>instances</th>
              <th>now, on @{preview.from.version}</th>
              <th>on {to}</th>
              <th>runs next on {to} (keys of the one planned)</th>
            </tr>
          </thead>
          <tbody>
            {preview.groups.map((g) => (
              <tr key={g.representative} data-testid="plan-group" data-moves={g.refusal === null ? 'yes' : 'no'}>
                <td>{g.count}</td>
                <td>
                  <State state={g.state} /> at <code>{g.currentStep ?? '—'}</code>
                </td>
                <td class="wrap">{landing(g)}</td>
                <td class="wrap">{g.next === null ? '—' : <Next next={g.next} />}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      {preview.items.length > 0 ? (
        <table class="grid" data-testid="plan-items">
          <thead>
            <tr>
              <th>instance</th>
              <th>now, on @{preview.from.version}</th>
              <th>on {to}</th>
              <th>keeps</th>
              <th>runs next on {to}, under these keys</th>
              {results ? <th>moved?</th> : null}
            </tr>
          </thead>
          <tbody>
            {preview.items.map((p) => (
              <tr key={p.workflowId} data-testid="plan-item" data-id={p.workflowId} data-moves={p.refusal === null ? 'yes' : 'no'}>
                <td>
                  <a href={`/ui/instances/${p.workflowId}`}>
                    <Short id={p.workflowId} />
                  </a>
                </td>
                <td>
                  <State state={p.state} /> at <code>{p.from.step ?? '—'}</code>
                </td>
                <td class="wrap">{landing(p)}</td>
                <td class="wrap">{p.keeps === null ? '—' : <Keeps keeps={p.keeps} />}</td>
                <td class="wrap">{p.next === null ? '—' : <Next next={p.next} />}</td>
                {results ? <td class="wrap">{moved(results.get(p.workflowId))}</td> : null}
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
    </div>
  );
}

function landing(p: Pick<MigrationPlan | MigrationGroup, 'refusal' | 'lands'>) {
  if (p.refusal !== null) {
    return (
      <span data-testid="refusal">
        <span class="state s-failed">stays</span> <code>{p.refusal.code}</code>
        {p.refusal.retryable ? <small> (retryable)</small> : null} {p.refusal.message}
        {p.refusal.reasons.length > 0 ? (
          <ul class="reasons">
            {p.refusal.reasons.map((r) => (
              <li key={`${r.code}|${r.step}|${r.readBy ?? ''}`}>
                <code>{r.code}</code> {r.message}
              </li>
            ))}
          </ul>
        ) : null}
      </span>
    );
  }
  return (
    <span data-testid="lands">
      <span class="state s-completed">moves</span> to @{p.lands?.version} at <code>{p.lands?.step ?? '—'}</code>
    </span>
  );
}

const Keeps = ({ keeps }: { keeps: NonNullable<MigrationPlan['keeps']> }) => (
  <span>
    {keeps.step} attempt {keeps.attempt} <code>{keeps.idempotencyKey}</code>
  </span>
);

function Next({ next }: { next: NonNullable<MigrationPlan['next']> }) {
  return (
    <div data-testid="next">
      {next.assumes ? <small>if {next.assumes}: </small> : null}
      <ol class="next">
        {next.steps.map((s, i) => (
          <li key={`${i}|${s.step}`}>
            <code>{s.step}</code>
            {s.compensation ? ' (compensate)' : ''}
            {s.callsOut ? ' ↗' : ''} {s.idempotencyKey === null ? null : <code class="key">{s.idempotencyKey}</code>}
          </li>
        ))}
      </ol>{' '}
      then {next.stopsAt.state}
      {next.stopsAt.step === null ? '' : ` at ${next.stopsAt.step}`}
    </div>
  );
}

function moved(item: BulkItem | undefined) {
  if (item === undefined) return <span class="hint">not in the job</span>;
  return (
    <span data-testid="moved" data-status={item.status}>
      <span class={`state s-${item.status}`}>{item.status}</span>
      {item.state ? (
        <>
          {' '}
          now <State state={item.state} />
        </>
      ) : null}
      {item.error ? (
        <span class="err">
          {' '}
          <code>{item.error.code}</code> {item.error.message}
        </span>
      ) : null}
    </span>
  );
}
