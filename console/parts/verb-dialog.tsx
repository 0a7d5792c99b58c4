import { useState } from 'preact/hooks';
import type { VerbName, VerbPreview } from '../../contracts/api/verbs.ts';
import { post, type Session } from '../api.ts';
import { checkJson, JsonEditor } from './json-editor.tsx';
import type { Schema } from './json-schema.ts';
import { Problem } from './ui.tsx';

export type Verb = VerbName;


export interface VerbContext {
  session: Session;
  id: string;
  logic: { start: string; input?: Schema; steps: Record<string, { kind: string; output?: Schema }> };
  currentStep: string | null;
  /** The last input each step ran with: the repair editor starts from it. */
  lastInput: (step: string) => unknown;
  stepNames: string[];
}

const EXPLAIN: Record<Verb, string> = {
  retry: 'Runs the failed step (or failed compensation) again with a fresh attempt budget, under the same idempotency key.',
  repair: 'Rewinds to a step and runs it and everything after it again under a new generation, so every call carries a new idempotency key. New input replaces the workflow input at the start step, or that step’s input elsewhere.',
  cancel: 'Stops the instance. Without compensation it ends as cancelled at once and effects already made stay made. With compensation it first runs the registered compensations, last first (releasing reservations, refunding captures), then ends as cancelled.',
  'force-complete': 'Marks the stuck step done with the output you give, and the flow goes on from there. Nothing is called for that step.',
  replay: 'Runs again from a step with the original input, under a new generation (new idempotency keys).',
};

/** A destructive verb: its fields, then its dry-run preview, then a reason, then the call. */
export function VerbDialog({ verb, ctx, onDone, onClose }: { verb: Verb; ctx: VerbContext; onDone: () => void; onClose: () => void }) {
  const steps = ctx.stepNames;
  const [step, setStep] = useState(verb === 'repair' || verb === 'replay' || verb === 'force-complete' ? (ctx.currentStep ?? ctx.logic.start) : '');
  const [text, setText] = useState(() => JSON.stringify(ctx.lastInput(ctx.currentStep ?? ctx.logic.start) ?? {}, null, 2));
  const [useInput, setUseInput] = useState(true);
  const [compensate, setCompensate] = useState(false);
  const [undoRewound, setUndoRewound] = useState(false);
  const [reason, setReason] = useState('');
  const [preview, setPreview] = useState<VerbPreview | null>(null);
  const [error, setError] = useState<Error | null>(null);
  const [busy, setBusy] = useState(false);

  const schema: Schema | undefined =
    verb === 'repair' ? (step === ctx.logic.start ? ctx.logic.input : undefined) : verb === 'force-complete' ? ctx.logic.steps[step]?.output : undefined;
  const needsJson = (verb === 'repair' && useInput) || verb === 'force-complete';
  const json = needsJson ? checkJson(text, schema) : { problems: [] as string[], value: undefined };

  const body = (dryRun: boolean) => ({
    reason: dryRun ? reason || 'dry run' : reason,
    dryRun,
    ...(verb === 'repair' ? { rewindTo: step, ...(useInput ? { input: json.value } : {}), ...(undoRewound ? { compensateRewound: true } : {}) } : {}),
    ...(verb === 'replay' ? { step } : {}),
    ...(verb === 'force-complete' ? { step, output: json.value } : {}),
    ...(verb === 'cancel' ? { compensate } : {}),
  });
  const send = async (dryRun: boolean) => {
    setBusy(true);
    setError(null);
    try {
      const res = await post<VerbPreview>(ctx.session, `/workflows/${ctx.id}/${verb}`, body(dryRun));
      if (dryRun) setPreview(res);
      else onDone();
    } catch (e) {
      setError(e as Error);
    } finally {
      setBusy(false);
    }
  };
  const changed = () => setPreview(null);

  return (
    <div class="dialog" role="dialog" aria-label={`${verb} dialog`} data-testid={`dialog-${verb}`}>
      <h3>{verb}</h3>
      <p class="explain">{EXPLAIN[verb]}</p>
      {verb === 'repair' || verb === 'replay' || verb === 'force-complete' ? (
        <label>
          step{' '}
          <select
            value={step}
            aria-label="step"
            onChange={(e) => {
              const s = (e.target as HTMLSelectElement).value;
              setStep(s);
              if (verb === 'repair') setText(JSON.stringify(ctx.lastInput(s) ?? {}, null, 2));
              changed();
            }}
          >
            {steps.map((s) => (
              <option key={s} value={s}>
                {s}
                {s === ctx.logic.start ? ' (start: replaces the workflow input)' : ''}
              </option>
            ))}
          </select>
        </label>
      ) : null}
      {verb === 'repair' ? (
        <label class="inline">
          <input type="checkbox" checked={useInput} onChange={(e) => {
              setUseInput((e.target as HTMLInputElement).checked);
              changed();
            }} /> with new input
        </label>
      ) : null}
      {verb === 'repair' ? (
        <label class="inline">
          <input type="checkbox" checked={undoRewound} aria-label="undo rewound effects first" onChange={(e) => {
              setUndoRewound((e.target as HTMLInputElement).checked);
              changed();
            }} /> undo the rewound effects first (their compensations run, last first, before the re-run)
        </label>
      ) : null}
      {needsJson ? (
        <JsonEditor label={verb === 'force-complete' ? 'output' : 'new input'} text={text} schema={schema} onText={(t) => {
            setText(t);
            changed();
          }} />
      ) : null}
      {verb === 'cancel' ? (
        <label class="inline">
          <input type="checkbox" checked={compensate} aria-label="compensate" onChange={(e) => {
              setCompensate((e.target as HTMLInputElement).checked);
              changed();
            }} /> compensate
          (undo completed steps first)
        </label>
      ) : null}
      <Problem error={error} />
      {preview === null ? (
        <div class="buttons">
          <button type="button" disabled={busy || json.problems.length > 0} onClick={() => send(true)}>
            Preview
          </button>
          <button type="button" class="link" onClick={onClose}>
            Close
          </button>
        </div>
      ) : (
        <div class="preview" data-testid="verb-preview">
          <h4>Dry run: what would happen</h4>
          {preview.steps.length === 0 ? <p>No step would run again.</p> : null}
          <table class="grid">
            <thead>
              <tr>
                <th>step</th>
                <th>kind</th>
                <th>calls out</th>
                <th>new idempotency key</th>
              </tr>
            </thead>
            <tbody>
              {preview.steps.map((s, i) => (
                <tr key={`${s.step}-${i}`}>
                  <td>
                    {s.step}
                    {s.compensation ? ' (compensation)' : ''}
                  </td>
                  <td>{s.kind}</td>
                  <td>{s.callsOut ? 'yes' : 'no'}</td>
                  <td>
                    <code>{s.idempotencyKey ?? '—'}</code>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          <p>
            Generation {preview.generation}
            {preview.compensations.length > 0 ? `; registers compensations: ${preview.compensations.join(', ')}` : ''};{' '}
            {preview.stopsAt.state === 'pending' && preview.stopsAt.step ? (
              <>
                what follows <b>{preview.stopsAt.step}</b> depends on its answer, which it never gave.
              </>
            ) : (
              <>
                stops at <b>{preview.stopsAt.state}</b>
                {preview.stopsAt.step ? ` (${preview.stopsAt.step})` : ''}, if every call answers as before.
              </>
            )}
          </p>
          {preview.keptEffects !== undefined && preview.keptEffects.length > 0 ? (
            <div data-testid="kept-effects">
              <p>
                <b>Effects that stay in place:</b> the rewound steps already did these, and the re-run does them again under new keys.
                Undo them first with the option above.
              </p>
              <table class="grid">
                <thead>
                  <tr>
                    <th>step</th>
                    <th>generation</th>
                    <th>compensation</th>
                    <th>its key</th>
                  </tr>
                </thead>
                <tbody>
                  {preview.keptEffects.map((k) => (
                    <tr key={k.compensationKey}>
                      <td>{k.step}</td>
                      <td>{k.generation}</td>
                      <td>{k.compensation}</td>
                      <td>
                        <code>{k.compensationKey}</code>
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          ) : null}
          <label class="reason">
            reason (recorded in the audit with your token’s subject)
            <input value={reason} aria-label="reason" onInput={(e) => setReason((e.target as HTMLInputElement).value)} />
          </label>
          <div class="buttons">
            <button type="button" class="danger" disabled={busy || reason.trim() === ''} onClick={() => send(false)}>
              Confirm {verb}
            </button>
            <button type="button" class="link" onClick={onClose}>
              Cancel
            </button>
          </div>
        </div>
      )}
    </div>
  );
}
