import type { ComponentChildren } from 'preact';
import { useCallback, useEffect, useState } from 'preact/hooks';
import { isTombstone } from '../../contracts/erasure.ts';
import { ApiError } from '../api.ts';

/** Loads once per `deps` change; `reload()` loads again (after a verb, not on a timer). */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): { data: T | null; error: Error | null; reload: () => void } {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<Error | null>(null);
  const [n, setN] = useState(0);
  useEffect(() => {
    let live = true;
    load().then(
      (d) => {
        if (!live) return;
        setData(d);
        setError(null);
      },
      (e) => {
        if (live) setError(e);
      },
    );
    return () => {
      live = false;
    };
  }, [...deps, n]);
  return { data, error, reload: useCallback(() => setN((x) => x + 1), []) };
}

/** An error as the API answered it (problem+json): its code, its detail, and each problem it lists. */
export function Problem({ error }: { error: Error | null }) {
  if (error === null) return null;
  const listed = error instanceof ApiError ? problemsOf(error.errors) : [];
  return (
    <div class="problem" role="alert" data-code={error instanceof ApiError ? error.code : undefined}>
      {error instanceof ApiError ? <code>{error.code}</code> : null} {error.message}
      {error instanceof ApiError && error.code === 'FLOW_ENV_FORBIDDEN' ? (
        <span class="hint">
          {' '}
          Pick one of the token's envs in the header, or open the console with <code>?env=NAME</code>.
        </span>
      ) : null}
      {listed.length > 0 ? (
        <ul class="problems">
          {listed.map((p) => (
            <li key={p}>{p}</li>
          ))}
        </ul>
      ) : null}
    </div>
  );
}

/** A problem's `errors` (`[{ path, message }]`) as lines; the detail already says what a lone one says. */
function problemsOf(errors: unknown): string[] {
  if (!Array.isArray(errors) || errors.length < 2) return [];
  return errors.map((e: { path?: unknown; message?: unknown }) => (e.path ? `${String(e.path)}: ${String(e.message)}` : String(e.message)));
}

export const State = ({ state }: { state: string }) => <span class={`state s-${state}`}>{state.replace('_', ' ')}</span>;

export function ago(iso: string | null | undefined): string {
  if (!iso) return '';
  const ms = Date.now() - Date.parse(iso);
  if (ms < 60_000) return `${Math.max(0, Math.round(ms / 1000))}s ago`;
  if (ms < 3_600_000) return `${Math.round(ms / 60_000)}m ago`;
  if (ms < 86_400_000) return `${Math.round(ms / 3_600_000)}h ago`;
  return `${Math.round(ms / 86_400_000)}d ago`;
}

export function duration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms / 60_000)} min`;
}

/** A JSON value; what erasure left (contracts/erasure.ts) reads as such, with when (and the error code it kept). */
export const JsonView = ({ value }: { value: unknown }) =>
  isTombstone(value) ? (
    <p class="erased">
      erased {new Date(value.at).toLocaleString()}
      {typeof value.code === 'string' ? ` (error ${value.code})` : ''}
    </p>
  ) : (
    <pre class="json">{value === undefined ? '—' : JSON.stringify(value, null, 2)}</pre>
  );

export const Short = ({ id }: { id: string }) => (
  <code class="id" title={id}>
    {id.slice(0, 8)}
  </code>
);

/** A button the token's scopes may not allow: disabled, with the missing scope named. */
export function Guarded(props: { missing: string | null; onClick: () => void; children: ComponentChildren; class?: string; disabled?: boolean }) {
  const blocked = props.missing !== null;
  return (
    <button
      type="button"
      class={props.class}
      disabled={blocked || props.disabled}
      title={props.missing ?? undefined}
      data-missing={props.missing ?? undefined}
      onClick={props.onClick}
    >
      {props.children}
      {blocked ? <small class="scope-missing"> ({props.missing})</small> : null}
    </button>
  );
}
