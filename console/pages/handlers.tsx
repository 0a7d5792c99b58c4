import type { HandlerPathGroup, HandlerReach, HandlerUsageList } from '../../contracts/api/handlers.ts';
import { get } from '../api.ts';
import type { PageProps } from '../main.tsx';
import { Problem, State, useLoad } from '../parts/ui.tsx';

/** How a group reaches the path, in words (the same groups `s8flow handlers` prints). */
const REACH: Record<HandlerReach, string> = {
  at: 'calls it at this step',
  ahead: 'its path reaches a call of it',
  compensation: 'would call it unwinding',
  ungrouped: "past the report's group limit, counted as calling it",
  passed: 'past every call of it',
};

/**
 * The handler usage report (docs/owning-services.md, "Turning a handler off"): for each handler
 * profile and path the env's versions call, may it be turned off now, and who still needs it.
 * `?handler=` narrows it to one profile.
 */
export function HandlersPage({ session, url }: PageProps) {
  const handler = url.searchParams.get('handler');
  const q = handler === null ? '' : `?handler=${encodeURIComponent(handler)}`;
  const { data, error } = useLoad(() => get<HandlerUsageList>(session, `/handlers${q}`), [session.env, q]);
  return (
    <main class="page handlers">
      <h1>Handlers{handler === null ? '' : `: ${handler}`}</h1>
      <p class="hint">May a handler profile, or one path of it, be turned off now? Every version that calls it (active or retired) and where its live instances stand.</p>
      <Problem error={error} />
      {data !== null && data.items.length === 0 ? <p>No version of this env calls a handler.</p> : null}
      {(data?.items ?? []).map((h) => (
        <section key={h.handler} class="handler" data-testid="handler" data-handler={h.handler}>
          <h2>
            <a href={`/ui/handlers?handler=${encodeURIComponent(h.handler)}`}>{h.handler}</a> <Verdict may={h.mayTurnOff} />
          </h2>
          <p class="reason">{h.reason}</p>
          <table class="grid">
            <thead>
              <tr>
                <th>path</th>
                <th>may turn off</th>
                <th>called by, and its live instances</th>
              </tr>
            </thead>
            <tbody>
              {h.paths.map((p) => (
                <tr key={p.path} data-testid="handler-path" data-path={p.path}>
                  <td>
                    <code>
                      {p.methods.join('|')} {p.path}
                    </code>
                  </td>
                  <td class="wrap">
                    <Verdict may={p.mayTurnOff} />
                    <div class="reason">{p.reason}</div>
                  </td>
                  <td class="wrap">
                    {p.versions.map((v) => (
                      <div key={`${v.logicId}@${v.version}`} class="caller">
                        <a href={`/ui/versions/${encodeURIComponent(v.logicId)}/${v.version}`}>
                          {v.logicId}@{v.version}
                        </a>{' '}
                        {v.active ? 'active' : 'retired'}, from {v.calledFrom.join(', ')}
                        <ul class="groups">
                          {v.groups.map((g) => (
                            <Group key={`${g.state}|${g.currentStep}|${g.reach}`} g={g} logicId={v.logicId} version={v.version} />
                          ))}
                        </ul>
                      </div>
                    ))}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      ))}
      {data !== null && data.unreadable > 0 ? (
        <p class="hint">{data.unreadable} version(s) your token may not read also call these; they count in every answer but are not named.</p>
      ) : null}
    </main>
  );
}

const Verdict = ({ may }: { may: boolean }) => <span class={`state ${may ? 's-completed' : 's-failed'}`}>{may ? 'yes' : 'no'}</span>;

function Group({ g, logicId, version }: { g: HandlerPathGroup; logicId: string; version: number }) {
  const list = `/ui/instances?logicId=${encodeURIComponent(logicId)}&version=${version}${g.state === null ? '' : `&state=${g.state}`}`;
  return (
    <li data-testid="usage-group" data-reach={g.reach}>
      <a href={list}>{g.count}</a> {g.state === null ? null : <State state={g.state} />}
      {g.currentStep === null ? null : (
        <>
          {' '}
          at <code>{g.currentStep}</code>
        </>
      )}
      : {REACH[g.reach]}
      {g.via === null ? '' : ` (${g.via})`}
    </li>
  );
}
