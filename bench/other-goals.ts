import { spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { GoalRow } from './support.ts';

const REPO = fileURLToPath(new URL('../', import.meta.url));

/**
 * The benches that measure the other performance goals, in the order their rows go in `npm run bench`'s
 * table. `quick`: also run by `npm run bench -- --quick` (growth and timers take minutes each).
 */
const BENCHES = [
  { script: 'cpu.bench.ts', quick: true },
  { script: 'compile.bench.ts', quick: true },
  { script: 'fairness.bench.ts', quick: true },
  { script: 'restate.bench.ts', quick: true },
  { script: 'pooler.bench.ts', quick: true },
  { script: 'retention.bench.ts', quick: true },
  { script: 'search-attributes.bench.ts', quick: true },
  { script: 'limits.bench.ts', quick: true },
  { script: 'growth.bench.ts', quick: false },
  { script: 'timers.bench.ts', quick: false },
] as const;

export interface OtherGoals {
  rows: GoalRow[];
  /** The log file of each bench that ran: its full output. */
  logs: string[];
  /** Benches `--quick` left out. */
  skipped: string[];
}

/**
 * Runs each of the other goal benches once, one after another, as a child process on the same
 * server (DATABASE_URL is passed on), and collects the goal rows each reports (support.ts
 * `reportGoal`). Each bench keeps its own sizes: the engine bench's BENCH_WORKFLOWS and
 * BENCH_ROUNDS are not passed on. A bench that fails, or reports no row, fails the run, naming its log.
 */
export function runOtherGoals(quick: boolean): OtherGoals {
  const dir = join(REPO, '.tmp', 'bench');
  mkdirSync(dir, { recursive: true });
  const { BENCH_WORKFLOWS: _w, BENCH_ROUNDS: _r, ...env } = process.env;
  const rows: GoalRow[] = [];
  const logs: string[] = [];
  const skipped: string[] = [];
  for (const bench of BENCHES) {
    if (quick && !bench.quick) {
      skipped.push(bench.script);
      continue;
    }
    const log = join(dir, bench.script.replace('.bench.ts', '.txt'));
    const rowsFile = join(dir, bench.script.replace('.bench.ts', '.rows.jsonl'));
    rmSync(rowsFile, { force: true });
    const fd = openSync(log, 'w');
    const args = [join(REPO, 'bench', bench.script), ...(quick ? ['--quick'] : [])];
    const run = spawnSync(join(REPO, 'node_modules', '.bin', 'tsx'), args, { cwd: REPO, env: { ...env, BENCH_ROWS: rowsFile }, stdio: ['ignore', fd, fd] });
    closeSync(fd);
    if (run.status !== 0) throw new Error(`bench/${bench.script} exited ${run.status ?? run.signal}: see ${log}`);
    const reported = readRows(rowsFile);
    if (reported.length === 0) throw new Error(`bench/${bench.script} reported no goal row: see ${log}`);
    rows.push(...reported);
    logs.push(log);
  }
  return { rows, logs, skipped };
}

function readRows(file: string): GoalRow[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as GoalRow);
}
