import { type LogicVersion, TERMINAL_STATES } from '../../contracts/index.ts';
import { Refused } from './errors.ts';
import type { Instance, JsonValue } from './instance.ts';
import { messageRefusal } from './wake.ts';

/**
 * What a delivery does with a message (docs/messages.md), decided once for the engine
 * (runtime/messages.ts) and the in-process runner: hand it to the waitFor step the instance is
 * parked on (`deliver`), or keep it until the instance reaches one (`buffer`). Throws the refusal:
 * an ended instance, a name no waitFor step of the version takes, a payload that breaks the
 * step's schema, a full buffer. A repeated Idempotency-Key is answered before this is asked.
 */
export function planDelivery(
  logic: LogicVersion,
  inst: Instance,
  m: { name: string; payload: JsonValue },
  buffer: { olderOfName: boolean; count: number; max: number },
): 'deliver' | 'buffer' {
  if (TERMINAL_STATES.has(inst.state)) throw new Refused('FLOW_INSTANCE_ENDED', `workflow ${inst.id} has ended (${inst.state}); it takes no more messages`);
  const refusal = messageRefusal(logic, m.name, m.payload);
  if (refusal !== null) throw refusal;
  // older messages of the name go first: this one waits behind them
  if (waitingOn(logic, inst) === m.name && !buffer.olderOfName) return 'deliver';
  if (buffer.count >= buffer.max) {
    throw new Refused(
      'FLOW_MESSAGE_BUFFER_FULL',
      `workflow ${inst.id} already holds ${buffer.max} messages waiting for their step (FLOW_MESSAGE_BUFFER_MAX); send again once it takes some`,
    );
  }
  return 'buffer';
}

/** The message name the instance is parked on (a waitFor step), or null. */
export function waitingOn(logic: LogicVersion, inst: Instance): string | null {
  const running = inst.ctx.running;
  const step = running === null ? undefined : logic.steps[running.step];
  return inst.state === 'waiting' && step?.kind === 'waitFor' ? step.message : null;
}

/** How many messages may wait per instance for the waitFor step that takes them. (Default: 100; FLOW_MESSAGE_BUFFER_MAX) */
export const DEFAULT_MESSAGE_BUFFER_MAX = 100;
