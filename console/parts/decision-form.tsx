import { useState } from 'preact/hooks';
import { post, type Session } from '../api.ts';
import { schemaProblems, type Schema } from './json-schema.ts';
import { Problem } from './ui.tsx';

interface Field {
  name: string;
  schema: Schema;
  required: boolean;
}

/** Form fields for the top-level properties of an object schema; anything else gets a JSON box. */
function fieldsOf(schema: Schema | undefined): Field[] | null {
  if (schema === undefined) return [];
  if (schema['type'] !== 'object' || typeof schema['properties'] !== 'object') return null;
  const required = new Set((schema['required'] ?? []) as string[]);
  return Object.entries(schema['properties'] as Record<string, Schema>).map(([name, s]) => ({ name, schema: s, required: required.has(name) }));
}

function coerce(s: Schema, raw: string | boolean): unknown {
  if (s['type'] === 'boolean') return raw === true;
  if (s['type'] === 'number' || s['type'] === 'integer') return raw === '' ? undefined : Number(raw);
  return raw === '' ? undefined : raw;
}

/** Answers a decision: one button per option, and a form generated from the payload schema. */
export function DecisionForm(props: {
  session: Session;
  id: string;
  step: string;
  options: string[];
  schema?: Schema | undefined;
  approverScope?: string | undefined;
  blocked: string | null;
  onDone: () => void;
}) {
  const fields = fieldsOf(props.schema);
  const [values, setValues] = useState<Record<string, string | boolean>>({});
  const [raw, setRaw] = useState('{}');
  const [reason, setReason] = useState('');
  const [error, setError] = useState<Error | null>(null);
  let payload: unknown;
  let problems: string[] = [];
  if (fields === null) {
    try {
      payload = JSON.parse(raw);
      problems = schemaProblems(props.schema, payload);
    } catch (e) {
      problems = [`not JSON: ${(e as Error).message}`];
    }
  } else {
    const obj: Record<string, unknown> = {};
    for (const f of fields) {
      const v = coerce(f.schema, values[f.name] ?? (f.schema['type'] === 'boolean' ? false : ''));
      if (v !== undefined) obj[f.name] = v;
    }
    payload = obj;
    problems = schemaProblems(props.schema, payload);
  }
  const answer = (option: string) =>
    post(props.session, `/workflows/${props.id}/decisions/${encodeURIComponent(props.step)}`, {
      option,
      ...(props.schema ? { payload } : {}),
      ...(reason ? { reason } : {}),
    }).then(props.onDone, setError);

  return (
    <section class="decision" data-testid="decision-form">
      <h3>Decision: {props.step}</h3>
      {props.approverScope ? (
        <p class="explain">
          Needs <code>flow:decide</code> and the step’s approver scope <code>{props.approverScope}</code>. You are recorded as the approver.
        </p>
      ) : null}
      {fields === null ? (
        <label>
          payload (JSON)
          <textarea rows={5} value={raw} onInput={(e) => setRaw((e.target as HTMLTextAreaElement).value)} />
        </label>
      ) : (
        fields.map((f) => {
          const s = f.schema;
          const label = `${f.name}${f.required ? ' *' : ''}`;
          if (s['type'] === 'boolean') {
            return (
              <label key={f.name} class="inline">
                <input type="checkbox" checked={values[f.name] === true} onChange={(e) => setValues({ ...values, [f.name]: (e.target as HTMLInputElement).checked })} /> {label}
              </label>
            );
          }
          if (Array.isArray(s['enum'])) {
            return (
              <label key={f.name}>
                {label}
                <select value={String(values[f.name] ?? '')} onChange={(e) => setValues({ ...values, [f.name]: (e.target as HTMLSelectElement).value })}>
                  <option value="" />
                  {(s['enum'] as string[]).map((o) => (
                    <option key={o}>{o}</option>
                  ))}
                </select>
              </label>
            );
          }
          return (
            <label key={f.name}>
              {label}
              <input
                name={f.name}
                aria-label={f.name}
                type={s['type'] === 'number' || s['type'] === 'integer' ? 'number' : 'text'}
                value={String(values[f.name] ?? '')}
                onInput={(e) => setValues({ ...values, [f.name]: (e.target as HTMLInputElement).value })}
              />
            </label>
          );
        })
      )}
      {problems.length > 0 ? (
        <ul class="problems">
          {problems.map((p) => (
            <li key={p}>{p}</li>
          ))}
        </ul>
      ) : null}
      <label class="reason">
        note for the audit (optional)
        <input value={reason} onInput={(e) => setReason((e.target as HTMLInputElement).value)} />
      </label>
      <div class="buttons">
        {props.options.map((o) => (
          <button
            key={o}
            type="button"
            data-option={o}
            disabled={props.blocked !== null || problems.length > 0}
            title={props.blocked ?? undefined}
            onClick={() => answer(o)}
          >
            {o}
            {props.blocked ? <small class="scope-missing"> ({props.blocked})</small> : null}
          </button>
        ))}
      </div>
      <Problem error={error} />
    </section>
  );
}
