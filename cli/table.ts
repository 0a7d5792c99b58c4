/** Rows as an aligned text table: what people read. `--json` is for scripts. */
export function table(rows: readonly Record<string, unknown>[], columns: readonly string[]): string {
  const cell = (v: unknown) => (v === null || v === undefined ? '' : typeof v === 'object' ? JSON.stringify(v) : String(v));
  const cells = rows.map((r) => columns.map((c) => cell(r[c]).replace(/\s+/g, ' ')));
  const width = columns.map((c, i) => Math.min(60, Math.max(c.length, ...cells.map((r) => r[i]!.length))));
  const line = (r: readonly string[]) =>
    r
      .map((v, i) => (v.length > width[i]! ? `${v.slice(0, width[i]! - 1)}…` : v.padEnd(width[i]!)))
      .join('  ')
      .trimEnd();
  return `${[line(columns), ...cells.map(line)].join('\n')}\n`;
}

/** A progress bar for stderr: redrawn in place on a terminal, a line per tenth elsewhere. */
export function progress(label: string, total: number): (done: number, failed: number) => void {
  let lastTenth = -1;
  return (done, failed) => {
    const pct = total === 0 ? 1 : done / total;
    const text = `${label} [${'#'.repeat(Math.round(pct * 30)).padEnd(30, '.')}] ${done}/${total}${failed > 0 ? ` (${failed} failed)` : ''}`;
    if (process.stderr.isTTY) {
      process.stderr.write(`\r${text}${done === total ? '\n' : ''}`);
    } else if (Math.floor(pct * 10) !== lastTenth) {
      lastTenth = Math.floor(pct * 10);
      process.stderr.write(`${text}\n`);
    }
  };
}
