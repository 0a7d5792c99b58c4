/**
 * The order of an instance's timeline (attempts, compensation runs and audit entries), as a pure
 * function without zod, so the console, the CLI and the API order it the same way.
 */

/** A timeline row: when it happened, and whether it is an audit entry (a verb) rather than an attempt. */
export interface TimelineRow {
  at: string;
  audit: boolean;
}

/**
 * By time; at the same instant the audit entry first. A verb's audit row and the attempt it
 * prepares commit in one transaction, so they carry one timestamp, and the verb is the cause.
 * Rows of one kind at one instant keep their order (sort is stable).
 */
export function timelineOrder(a: TimelineRow, b: TimelineRow): number {
  return Date.parse(a.at) - Date.parse(b.at) || Number(b.audit) - Number(a.audit);
}
