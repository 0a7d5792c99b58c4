import { Cron } from 'croner';
import { IsoDuration, SCHEDULE_NAME_PATTERN, ScheduleOverlap } from '../contracts/logic-version.ts';
import type { BuilderState } from './assemble.ts';
import type { DraftSchedule } from './draft.ts';
import { FlowSdkError, SdkErrorCode } from './errors.ts';

/**
 * A `.schedule()` declaration checked where it is written, so the compiler reports it against the
 * workflow: the pattern and zone as croner reads them (the engine fires with croner too), the
 * overlap rule, the catch-up duration, the name, and the input against the input schema.
 */
export function checkedSchedule(state: BuilderState, cron: string, options: Record<string, unknown>): DraftSchedule {
  const at = `${state.meta.logicId}@${state.meta.version} schedule "${cron}"`;
  const refuse = (why: string): never => {
    throw new FlowSdkError(SdkErrorCode.invalidOption, `${at}: ${why}`);
  };
  const { name, timezone, overlap, catchUp, input } = options as Omit<DraftSchedule, 'cron'>;
  let pattern: Cron;
  try {
    pattern = new Cron(cron, { timezone: timezone ?? 'UTC', paused: true, mode: '5-or-6-parts' });
  } catch (err) {
    return refuse(`not a cron pattern croner can read (${(err as Error).message})`);
  }
  try {
    pattern.nextRun(new Date(0));
  } catch {
    refuse(`timezone "${timezone}" is not an IANA time zone such as "Europe/Berlin"`);
  }
  if (name !== undefined && !SCHEDULE_NAME_PATTERN.test(name)) refuse(`name "${name}" must match ${SCHEDULE_NAME_PATTERN}`);
  const names = state.schedules.map((s, i) => s.name ?? String(i + 1));
  if (names.includes(name ?? String(state.schedules.length + 1))) refuse('another schedule of this workflow has the same name: give each a name');
  if (overlap !== undefined && !ScheduleOverlap.safeParse(overlap).success) refuse(`overlap must be one of ${ScheduleOverlap.options.join(', ')}`);
  if (catchUp !== undefined && !IsoDuration.safeParse(catchUp).success) refuse(`catchUp "${catchUp}" is not an ISO 8601 duration such as PT5M or P1D`);
  const schema = state.meta.input as unknown as { safeParse?: (v: unknown) => { success: boolean; error?: { message: string } } };
  const checked = schema.safeParse?.(input ?? {});
  if (checked !== undefined && !checked.success) refuse(`its input does not match the workflow's input schema: ${checked.error?.message ?? ''}`);
  return {
    ...(name === undefined ? {} : { name }),
    cron,
    ...(timezone === undefined ? {} : { timezone }),
    ...(overlap === undefined ? {} : { overlap }),
    ...(catchUp === undefined ? {} : { catchUp }),
    ...(input === undefined ? {} : { input: structuredClone(input) }),
  };
}
