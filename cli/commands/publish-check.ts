import { createFlowClient, FlowApiError } from '../../client/index.ts';
import type { CompatibilityGroup, CompatibilityReport } from '../../contracts/api/compatibility.ts';
import { publishOrder, readArtifactDir } from '../../engine/runtime/artifacts.ts';

/**
 * `s8flow publish --check`: asks the engine for the compatibility report of every compiled version
 * against the live instances of the version it would follow, and prints it. Nothing is published.
 * Exit code 1 when a version cannot be checked (refused, invalid), or, with `failOnUnsafe`, when
 * any report is unsafe; 0 otherwise. Replays (`replay`) are reported but never fail it: a new
 * version is meant to decide some runs otherwise.
 */
export async function publishCheck(
  baseUrl: string,
  from: string,
  token: string,
  env: string | undefined,
  opts: { failOnUnsafe: boolean; replay: number },
): Promise<number> {
  const client = createFlowClient({ baseUrl, token, ...(env === undefined ? {} : { env }) });
  let failed = 0;
  let unsafe = 0;
  for (const doc of publishOrder(await readArtifactDir(from))) {
    const key = `${doc.logicId}@${doc.version}`;
    try {
      const report = await client.checkCompatibility(doc, opts.replay > 0 ? { replay: opts.replay } : {});
      if (report.verdict === 'unsafe') unsafe++;
      process.stdout.write(formatReport(report));
    } catch (err) {
      if (!(err instanceof FlowApiError)) throw err;
      failed++;
      process.stderr.write(`s8flow publish --check: ${key}: ${err.message} [${err.code}]\n`);
    }
  }
  return failed > 0 || (opts.failOnUnsafe && unsafe > 0) ? 1 : 0;
}

/** The report as a person reads it: one paragraph per version, one block per group. */
export function formatReport(r: CompatibilityReport): string {
  const key = `${r.logicId}@${r.candidate.version}`;
  if (r.against === null) return `${key}: nothing to check (no active version below it)\n`;
  const lines = [
    `${key} against ${r.logicId}@${r.against.version}: ${r.verdict.toUpperCase()} — ${r.live} live instance${r.live === 1 ? '' : 's'}, ${r.unsafe} in unsafe groups`,
  ];
  for (const g of r.groups) lines.push(...formatGroup(g));
  if (r.truncated) lines.push(`  (more groups than listed: the rest were not evaluated, so the report cannot be safe)`);
  if (r.replays !== undefined) {
    const p = r.replays;
    lines.push(`  replayed ${p.replayed} ended instance${p.replayed === 1 ? '' : 's'} of ${r.logicId}@${r.against.version}: ${p.same} decided the same, ${p.diverged.length} diverged${p.erased > 0 ? `, ${p.erased} erased` : ''}`);
    for (const d of p.diverged) {
      const where = d.step === null ? '' : ` (step ${d.step}${d.attempt === null ? '' : `, attempt ${d.attempt}`})`;
      lines.push(`    ${d.id}: at event ${d.index} [${d.event}]${where} on ${d.field}`);
    }
  }
  return `${lines.join('\n')}\n`;
}

function formatGroup(g: CompatibilityGroup): string[] {
  const at = g.currentStep === null ? 'no step yet' : `at ${g.currentStep}`;
  const lines = [`  ${g.verdict === 'safe' ? 'safe  ' : 'UNSAFE'} ${String(g.count).padStart(7)} × ${g.state} ${at} (generation ${g.generation}), e.g. ${g.representative}`];
  lines.push(`           outputs: ${g.outputs.join(', ') || '—'}; compensations: ${g.compensations.join(', ') || '—'}`);
  for (const reason of g.reasons) lines.push(`           ${reason.code}: ${reason.message}`);
  const next = g.next;
  if (next !== null && next.steps.length === 0 && next.stopsAt.step === g.currentStep) {
    lines.push(`           next: stays ${next.stopsAt.state} at ${g.currentStep}: its answer is not known, so nothing past it is simulated`);
  } else if (next !== null) {
    const steps = next.steps.map((s) => `${s.compensation ? 'undo ' : ''}${s.step}${s.callsOut ? ` [${s.idempotencyKey}]` : ''}`);
    const assumed = next.assumes === null ? '' : ` (if ${next.assumes})`;
    lines.push(`           next${assumed}: ${steps.join(' → ') || '(nothing runs)'}; stops ${next.stopsAt.state}${next.stopsAt.step === null ? '' : ` at ${next.stopsAt.step}`}`);
  }
  return lines;
}
