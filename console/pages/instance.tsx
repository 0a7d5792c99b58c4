import { useEffect, useMemo, useState } from 'preact/hooks';
import type { WorkflowRecord } from '../../contracts/record.ts';
import { stream } from '../api.ts';
import type { PageProps } from '../main.tsx';
import { DecisionForm } from '../parts/decision-form.tsx';
import { Diagram, type Mark } from '../parts/diagram.tsx';
import type { Schema } from '../parts/json-schema.ts';
import { type Attempt, type AuditEntry, Timeline } from '../parts/timeline.tsx';
import { Guarded, JsonView, Problem, State } from '../parts/ui.tsx';
import { type Verb, VerbDialog } from '../parts/verb-dialog.tsx';
import { missing } from '../scopes.ts';
import { isTombstone } from '../../contracts/erasure.ts';


/** The record without its attempts, which the page keeps apart (updates replace them one by one). */
type RecordHead = Omit<WorkflowRecord, 'steps'>;
/** The parts of the LogicVersion the page reads. */
interface Logic {
  start: string;
  input?: Schema;
  steps: Record<string, { kind: string; output?: Schema; options?: string[]; schema?: Schema; approverScope?: string }>;
}

interface Live {
  record: RecordHead;
  steps: Attempt[];
  audit: AuditEntry[];
  logic: Logic;
  mmd: string | null;
}

const ACTIVE = new Set(['pending', 'processing', 'waiting', 'compensating']);

/** How each step stands: the last attempt decides, then the current step, then undone compensations. */
export function marksOf(record: RecordHead, steps: Attempt[]): Record<string, Mark> {
  const m: Record<string, Mark> = {};
  for (const a of steps) {
    if (a.kind !== 'step') continue;
    if (a.state === 'succeeded') m[a.step] = 'done';
    else if (a.state === 'failed') m[a.step] = 'failed';
    else if (a.state === 'running' || a.state === 'parked') m[a.step] = 'current';
    else delete m[a.step];
  }
  if (ACTIVE.has(record.state) && record.currentStep && record.state !== 'compensating') m[record.currentStep] = 'current';
  for (const c of record.compensations) if (c.state === 'succeeded') m[c.step] = 'compensated';
  return m;
}

const VERBS: { verb: Verb; scope: 'flow:retry' | 'flow:repair' | 'flow:cancel' | 'flow:force-complete' | 'flow:replay'; when: string[] }[] = [
  { verb: 'retry', scope: 'flow:retry', when: ['failed', 'dead_lettered'] },
  { verb: 'repair', scope: 'flow:repair', when: ['failed', 'dead_lettered', 'compensated'] },
  { verb: 'replay', scope: 'flow:replay', when: ['completed', 'failed', 'compensated', 'dead_lettered'] },
  { verb: 'force-complete', scope: 'flow:force-complete', when: ['dead_lettered', 'waiting'] },
  { verb: 'cancel', scope: 'flow:cancel', when: ['pending', 'processing', 'waiting', 'dead_lettered'] },
];

export function InstancePage({ session, claims, params }: PageProps & { params: string[] }) {
  const id = params[0]!;
  const [live, setLive] = useState<Live | null>(null);
  const [error, setError] = useState<Error | null>(null);
  const [dialog, setDialog] = useState<Verb | null>(null);
  const [updates, setUpdates] = useState(0);

  useEffect(() => {
    const abort = new AbortController();
    setLive(null);
    void stream(
      session,
      `/workflows/${id}/live`,
      (type, data) => {
        if (type === 'snapshot') {
          performance.mark('flow:snapshot');
          const d = data as { record: RecordHead & { steps: Attempt[] }; audit: AuditEntry[]; logic: Logic; mmd: string | null };
          const { steps, ...record } = d.record;
          setLive({ record, steps, audit: d.audit, logic: d.logic, mmd: d.mmd });
        } else if (type === 'update') {
          const d = data as { record: RecordHead; steps: [number, Attempt][]; audit?: AuditEntry[] };
          setUpdates((n) => n + 1);
          setLive((prev) => {
            if (prev === null) return prev;
            const steps = d.steps.length === 0 ? prev.steps : prev.steps.slice();
            for (const [i, a] of d.steps) steps[i] = a;
            return { ...prev, record: d.record, steps, audit: d.audit ?? prev.audit };
          });
        } else if (type === 'error') {
          const e = data as { code: string; message: string };
          setError(new Error(`${e.code}: ${e.message}`));
        }
      },
      abort.signal,
    );
    return () => abort.abort();
  }, [id, session.env, session.token]);

  // for bench:ui: when the page first shows the instance (effects run after the browser paints)
  const shown = live !== null;
  useEffect(() => {
    if (shown) performance.mark('flow:rendered');
  }, [shown]);
  const marks = useMemo(() => (live ? marksOf(live.record, live.steps) : {}), [live?.record, live?.steps]);
  if (error) return <Problem error={error} />;
  if (live === null) return <p class="loading">Loading…</p>;
  const { record, logic } = live;
  const current = record.currentStep ? logic.steps[record.currentStep] : undefined;
  const deciding = record.state === 'waiting' && current?.kind === 'decision';
  const lastInput = (step: string) => {
    if (step === logic.start) return record.input;
    for (let i = live.steps.length - 1; i >= 0; i--) if (live.steps[i]!.step === step && live.steps[i]!.kind === 'step') return live.steps[i]!.input;
    return {};
  };

  return (
    <main class="page instance" data-testid="instance" data-state={record.state} data-updates={updates}>
      <h1>
        {record.logicId}@{record.version} <State state={record.state} />
      </h1>
      <dl class="facts">
        <dt>id</dt>
        <dd>
          <code>{record.id}</code>
        </dd>
        <dt>correlation id</dt>
        <dd>{record.correlationId ?? '—'}</dd>
        <dt>current step</dt>
        <dd data-testid="current-step">{record.currentStep ?? '—'}</dd>
        <dt>generation</dt>
        <dd>{record.generation}</dd>
        {record.attributes ? (
          <>
            <dt>attributes</dt>
            <dd data-testid="attributes">
              {Object.entries(record.attributes).map(([name, value]) => (
                <a key={name} class="attr" href={`/ui/instances?logicId=${encodeURIComponent(record.logicId)}&${new URLSearchParams({ [`attr.${name}`]: String(value) })}`}>
                  {name}={String(value)}{' '}
                </a>
              ))}
            </dd>
          </>
        ) : null}
        {record.error ? (
          <>
            <dt>error</dt>
            <dd class="err" data-testid="instance-error">
              {record.error.code}: {record.error.message}
            </dd>
          </>
        ) : null}
      </dl>
      <div class="actions">
        {VERBS.filter((v) => v.when.includes(record.state) && !isTombstone(record.input)).map((v) => (
          <Guarded key={v.verb} missing={missing(claims, v.scope, record.logicId)} onClick={() => setDialog(v.verb)} class={v.verb === 'cancel' ? 'danger' : ''}>
            {v.verb}
          </Guarded>
        ))}
      </div>
      {dialog ? (
        <VerbDialog
          verb={dialog}
          ctx={{ session, id, logic, currentStep: record.currentStep, lastInput, stepNames: Object.keys(logic.steps) }}
          onDone={() => setDialog(null)}
          onClose={() => setDialog(null)}
        />
      ) : null}
      {deciding && current ? (
        <DecisionForm
          session={session}
          id={id}
          step={record.currentStep!}
          options={current.options ?? []}
          schema={current.schema}
          approverScope={current.approverScope}
          blocked={missing(claims, 'flow:decide', record.logicId)}
          onDone={() => {}}
        />
      ) : null}
      <div class="split">
        <section class="diagram-box">
          {live.mmd ? <Diagram mmd={live.mmd} marks={marks} /> : <p>No diagram for this version.</p>}
          <p class="legend">
            <span class="m-done">done</span> <span class="m-current">current</span> <span class="m-failed">failed</span> <span class="m-compensated">compensated</span>
          </p>
        </section>
        <section class="io">
          {isTombstone(record.input) ? <p class="erased">This instance was erased: its input, outputs and attempt data are gone. States, steps, times and the audit remain.</p> : null}
          <h4>input</h4>
          <JsonView value={record.input} />
          {record.output !== null ? (
            <>
              <h4>output</h4>
              <JsonView value={record.output} />
            </>
          ) : null}
          {record.compensations.length > 0 ? (
            <>
              <h4>compensations</h4>
              <ul class="plain">
                {record.compensations.map((c, i) => (
                  <li key={`${c.step}-${i}`} data-testid="compensation" data-generation={c.generation}>
                    undo {c.step} <small>(generation {c.generation})</small>: <State state={c.state} /> ({c.attempts} attempt{c.attempts === 1 ? '' : 's'})
                  </li>
                ))}
              </ul>
            </>
          ) : null}
        </section>
      </div>
      <h2>
        Timeline <small>({live.steps.length} attempts, {live.audit.length} audit entries; live)</small>
      </h2>
      <Timeline attempts={live.steps} audit={live.audit} />
    </main>
  );
}
