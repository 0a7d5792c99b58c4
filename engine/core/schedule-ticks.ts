import { Cron } from 'croner';
import type { ScheduleOverlap } from '../../contracts/index.ts';
import { ScheduleInvalid } from '../errors.ts';

/**
 * When a schedule ticks, and what each tick does. Pure: the caller says what time it is.
 *
 * Ticks are croner's reading of the pattern in the schedule's IANA zone, which settles the two
 * daylight-saving cases once for every caller: a local time that does not exist (spring forward,
 * 02:30 in Berlin on the last Sunday of March) ticks once, at the next valid instant (03:00
 * CEST); a local time that happens twice (fall back) ticks once, at its first occurrence. A
 * pattern whose hour is a wildcard ticks every elapsed hour, both 02:00s included (as cron does).
 */

/** Refuses a pattern or zone croner cannot read, naming which (FLOW_SCHEDULE_INVALID). */
export function cronOf(cron: string, timezone: string): Cron {
  let c: Cron;
  try {
    c = new Cron(cron, { timezone, paused: true, mode: '5-or-6-parts' });
  } catch (err) {
    throw new ScheduleInvalid(`cron "${cron}": ${(err as Error).message}`);
  }
  try {
    // croner checks the zone only when it converts a date
    c.nextRun(new Date(0));
  } catch (err) {
    throw new ScheduleInvalid(`timezone "${timezone}" is not an IANA time zone (${(err as Error).message.split('. ')[0]})`);
  }
  return c;
}

/** The first tick strictly after `after`; null when the pattern has no more. */
export function nextTick(cron: Cron, after: Date): Date | null {
  return cron.nextRun(after);
}

/** Ticks in (from, to], oldest first, at most `max`. */
export function ticksBetween(cron: Cron, from: Date, to: Date, max: number): Date[] {
  const out: Date[] = [];
  for (let t = cron.nextRun(from); t !== null && t <= to && out.length < max; t = cron.nextRun(t)) out.push(t);
  return out;
}

export type TickOutcome = 'started' | 'skipped_catch_up' | 'skipped_overlap' | 'buffered';

export interface FiringState {
  overlap: ScheduleOverlap;
  catchUpMs: number;
  /** Whether the schedule's last instance is still running (not in a terminal state). */
  previousRunning: boolean;
  /** A tick held back by `buffer_one`, if any. */
  buffered: Date | null;
}

export interface TickPlan {
  tick: Date;
  outcome: TickOutcome;
}

/**
 * What the due ticks do, at `now`. A tick older than `catchUp` is skipped (an outage longer than
 * the schedule tolerates). Of the rest, oldest first: with the previous instance still running,
 * `skip` skips the tick, `buffer_one` holds the newest one back (the tick it replaces is skipped)
 * until that instance ends, `allow` starts it anyway. A buffered tick is started as soon as the
 * previous instance has ended, ahead of any due tick. Only the first start in a round can find
 * the previous instance ended: the started one is then the previous one.
 */
export function planTicks(due: readonly Date[], now: Date, state: FiringState): { plans: TickPlan[]; buffered: Date | null } {
  const plans: TickPlan[] = [];
  let running = state.previousRunning;
  let buffered = state.buffered;
  if (buffered !== null && !running) {
    plans.push({ tick: buffered, outcome: 'started' });
    buffered = null;
    running = true;
  }
  for (const tick of due) {
    if (now.getTime() - tick.getTime() > state.catchUpMs) {
      plans.push({ tick, outcome: 'skipped_catch_up' });
      continue;
    }
    if (!running || state.overlap === 'allow') {
      plans.push({ tick, outcome: 'started' });
      running = true;
      continue;
    }
    if (state.overlap === 'buffer_one') {
      if (buffered !== null) plans.push({ tick: buffered, outcome: 'skipped_overlap' });
      plans.push({ tick, outcome: 'buffered' });
      buffered = tick;
      continue;
    }
    plans.push({ tick, outcome: 'skipped_overlap' });
  }
  return { plans, buffered };
}
