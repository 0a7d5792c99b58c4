import { schemaProblems, type Schema } from './json-schema.ts';

/** Parses editor text: the value, or why it is not JSON / breaks the schema. */
export function checkJson(text: string, schema?: Schema): { value?: unknown; problems: string[] } {
  if (text.trim() === '') return { problems: ['enter a JSON value'] };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return { problems: [`not JSON: ${(e as Error).message}`] };
  }
  return { value, problems: schemaProblems(schema, value) };
}

/** A JSON text area that shows, as you type, whether the text parses and fits the schema. */
export function JsonEditor(props: { label: string; text: string; onText: (t: string) => void; schema?: Schema | undefined }) {
  const { problems } = checkJson(props.text, props.schema);
  return (
    <div class="json-editor">
      <label>
        {props.label}
        {props.schema ? <small> (checked against the step's schema)</small> : <small> (no schema declared: any JSON)</small>}
        <textarea
          spellcheck={false}
          rows={Math.min(16, Math.max(4, props.text.split('\n').length + 1))}
          value={props.text}
          onInput={(e) => props.onText((e.target as HTMLTextAreaElement).value)}
          aria-label={props.label}
          aria-invalid={problems.length > 0}
        />
      </label>
      {problems.length > 0 ? (
        <ul class="problems" data-testid="json-problems">
          {problems.map((p) => (
            <li key={p}>{p}</li>
          ))}
        </ul>
      ) : (
        <p class="ok">valid</p>
      )}
    </div>
  );
}
