import { render } from 'preact';
import { useState } from 'preact/hooks';
import type { Session } from './api.ts';
import { BulkJobPage } from './pages/bulk-job.tsx';
import { HandlersPage } from './pages/handlers.tsx';
import { InstancePage } from './pages/instance.tsx';
import { InstancesPage } from './pages/instances.tsx';
import { MigratePage } from './pages/migrate.tsx';
import { OverviewPage } from './pages/overview.tsx';
import { SchedulesPage } from './pages/schedules.tsx';
import { VersionPage, VersionsPage } from './pages/versions.tsx';
import { interceptLinks, navigate, useLocation } from './router.ts';
import { type Claims, chooseEnv, decodeClaims, envChoices } from './scopes.ts';

export interface PageProps {
  session: Session;
  claims: Claims | null;
  url: URL;
}

interface Config {
  env: string;
  devToken?: string;
}

function route(path: string): [(p: PageProps & { params: string[] }) => preact.JSX.Element, string[]] {
  const parts = path.replace(/^\/ui\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  if (parts[0] === 'instances' && parts[1]) return [InstancePage, [parts[1]]];
  if (parts[0] === 'instances') return [InstancesPage, []];
  if (parts[0] === 'versions' && parts[1] && parts[2]) return [VersionPage, [parts[1], parts[2]]];
  if (parts[0] === 'versions') return [VersionsPage, []];
  if (parts[0] === 'bulk' && parts[1]) return [BulkJobPage, [parts[1]]];
  if (parts[0] === 'migrate' && parts[1]) return [MigratePage, [parts[1]]];
  if (parts[0] === 'schedules') return [SchedulesPage, []];
  if (parts[0] === 'handlers') return [HandlersPage, []];
  return [OverviewPage, []];
}

function SignIn({ onToken }: { onToken: (t: string) => void }) {
  const [text, setText] = useState('');
  return (
    <main class="signin">
      <h1>Sentin8 Flow</h1>
      <p>Paste a bearer token (mint one with <code>s8flow token</code>). The console calls the API with it; it is kept in this tab only, until it closes.</p>
      <textarea value={text} onInput={(e) => setText((e.target as HTMLTextAreaElement).value)} rows={5} aria-label="token" />
      <button type="button" onClick={() => onToken(text.trim())} disabled={text.trim() === ''}>
        Sign in
      </button>
    </main>
  );
}

/**
 * The env every page reads: a list of the token's envs, or a field for a token granting every env
 * (`*`). A pick is remembered in this browser and takes the place of the URL's `?env=`.
 */
function EnvPicker({ claims, env, url }: { claims: Claims | null; env: string; url: URL }) {
  const pick = (next: string) => {
    if (next === '' || next === env) return;
    localStorage.setItem('flow.env', next);
    const to = new URL(url);
    to.searchParams.delete('env');
    navigate(to.pathname + to.search);
  };
  if (claims?.envs.includes('*') ?? true) {
    return (
      <label>
        env{' '}
        <input
          class="env"
          aria-label="env"
          value={env}
          size={Math.max(8, env.length)}
          onChange={(e) => pick((e.target as HTMLInputElement).value.trim())}
        />
      </label>
    );
  }
  return (
    <label>
      env{' '}
      <select class="env" aria-label="env" value={env} onChange={(e) => pick((e.target as HTMLSelectElement).value)}>
        {envChoices(claims, env).map((e) => (
          <option key={e} value={e}>
            {e}
          </option>
        ))}
      </select>
    </label>
  );
}

function App() {
  const url = useLocation();
  const [config] = useState<Config>(() => JSON.parse(document.getElementById('flow-config')?.textContent ?? '{"env":"default"}'));
  // development only (s8flow dev): the server hands out a token, so the console signs in by itself
  // the token lives as long as the tab: sessionStorage, not localStorage, which outlives the session
  const [token, setToken] = useState<string | null>(() => sessionStorage.getItem('flow.token') ?? config.devToken ?? null);
  if (token === null) {
    return (
      <SignIn
        onToken={(t) => {
          sessionStorage.setItem('flow.token', t);
          setToken(t);
        }}
      />
    );
  }
  const claims = decodeClaims(token);
  const env = chooseEnv(claims, { server: config.env, url: url.searchParams.get('env'), picked: localStorage.getItem('flow.env') });
  const session: Session = { token, env };
  const [Page, params] = route(url.pathname);
  const here = url.pathname.replace(/^\/ui\/?/, '').split('/')[0] || 'overview';
  return (
    <>
      <header class="top">
        <a class="brand" href="/ui/">
          Sentin8 Flow
        </a>
        <nav>
          {(['overview', 'instances', 'versions', 'handlers', 'schedules'] as const).map((p) => (
            <a key={p} href={`/ui/${p === 'overview' ? '' : p}`} class={here === p ? 'here' : ''}>
              {p[0]!.toUpperCase() + p.slice(1)}
            </a>
          ))}
        </nav>
        <span class="who" title={claims?.scopes.join(' ')}>
          {claims?.sub ?? 'unknown token'} · <EnvPicker claims={claims} env={env} url={url} />
          <button
            type="button"
            class="link"
            onClick={() => {
              sessionStorage.removeItem('flow.token');
              setToken(null);
            }}
          >
            sign out
          </button>
        </span>
      </header>
      <Page session={session} claims={claims} url={url} params={params} />
    </>
  );
}

interceptLinks();
render(<App />, document.getElementById('app')!);
