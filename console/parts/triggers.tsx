import type { LogicVersion, MessageTrigger, StartTrigger, StepOfKind } from '../../contracts/logic-version.ts';

type WaitFor = StepOfKind<'waitFor'> & { step: string };

/**
 * What reaches a version from outside (docs/messages.md): the events that start an instance, the
 * events delivered as messages to live ones (and to which), and the waitFor steps that take them.
 */
export function Triggers({ logic }: { logic: Partial<LogicVersion> }) {
  const triggers = logic.triggers ?? [];
  // a message trigger names its message; any other trigger starts an instance (contracts/logic-version.ts)
  const messages = triggers.filter((t): t is MessageTrigger => 'message' in t);
  const starts = triggers.filter((t): t is StartTrigger => !('message' in t));
  const waits = Object.entries(logic.steps ?? {}).flatMap(([step, s]) => (s.kind === 'waitFor' ? [{ ...s, step }] : []));
  return (
    <section class="triggers" data-testid="triggers">
      <h2>Events and messages</h2>
      <div class="columns two">
        <div>
          <h3>Start triggers</h3>
          {starts.length === 0 ? (
            <p class="hint">No event starts an instance of this version.</p>
          ) : (
            <table class="grid" data-testid="start-triggers">
              <thead>
                <tr>
                  <th>event type</th>
                  <th>input</th>
                </tr>
              </thead>
              <tbody>
                {starts.map((t) => (
                  <tr key={t.event} data-event={t.event}>
                    <td>
                      <code>{t.event}</code>
                    </td>
                    <td class="wrap">
                      <code>{t.input}</code>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </div>
        <div>
          <h3>Message triggers</h3>
          {messages.length === 0 ? (
            <p class="hint">No event is delivered to live instances of this version.</p>
          ) : (
            <table class="grid" data-testid="message-triggers">
              <thead>
                <tr>
                  <th>event type</th>
                  <th>message</th>
                  <th>to the instances whose</th>
                  <th>payload</th>
                </tr>
              </thead>
              <tbody>
                {messages.map((t) => (
                  <tr key={`${t.event}|${t.message}`} data-event={t.event}>
                    <td>
                      <code>{t.event}</code>
                    </td>
                    <td>
                      <code>{t.message}</code>
                    </td>
                    <td class="wrap">
                      {'correlationId' in t.match ? 'correlationId' : `attribute ${t.match.attribute}`} = <code>{'correlationId' in t.match ? t.match.correlationId : t.match.value}</code>
                    </td>
                    <td class="wrap">{t.payload === undefined ? <span class="hint">the event's payload</span> : <code>{t.payload}</code>}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </div>
      </div>
      <h3>Steps that wait for a message</h3>
      {waits.length === 0 ? <p class="hint">No waitFor step.</p> : <WaitTable waits={waits} messages={messages} />}
    </section>
  );
}

function WaitTable({ waits, messages }: { waits: WaitFor[]; messages: MessageTrigger[] }) {
  return (
    <table class="grid" data-testid="wait-steps">
      <thead>
        <tr>
          <th>step</th>
          <th>message</th>
          <th>timeout</th>
          <th>delivered by</th>
        </tr>
      </thead>
      <tbody>
        {waits.map((w) => {
          const events = messages.filter((t) => t.message === w.message).map((t) => t.event);
          return (
            <tr key={w.step} data-step={w.step}>
              <td>
                <code>{w.step}</code>
              </td>
              <td>
                <code>{w.message}</code>
              </td>
              <td>{w.timeout ?? '—'}</td>
              <td class="wrap">
                {events.length === 0 ? '' : `events ${events.join(', ')}; `}
                <code>POST …/workflows/{'{id}'}/messages/{w.message}</code>
              </td>
            </tr>
          );
        })}
      </tbody>
    </table>
  );
}
