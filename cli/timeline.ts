import type { WorkflowRecord } from '../contracts/index.ts';

/** A readable account of one instance: every attempt, then the outcome. */
export function formatTimeline(r: WorkflowRecord): string {
  const lines = [`${r.logicId}@${r.version}  ${r.id}  → ${r.state}`];
  for (const s of r.steps) {
    const what = s.kind === 'compensation' ? `undo ${s.step}` : s.step;
    const detail = s.error ? `${s.error.code}: ${s.error.message}` : s.output === null ? '' : JSON.stringify(s.output);
    lines.push(`  ${s.state.padEnd(10)} ${what.padEnd(22)} #${s.attempt} g${s.generation}  ${truncate(detail, 90)}`);
  }
  if (r.error) lines.push(`  error: ${r.error.code}: ${r.error.message}`);
  if (r.state === 'completed') lines.push(`  output: ${truncate(JSON.stringify(r.output), 110)}`);
  return lines.join('\n');
}

export function printTimeline(r: WorkflowRecord): void {
  process.stdout.write(`${formatTimeline(r)}\n`);
}

function truncate(s: string, n: number): string {
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}
