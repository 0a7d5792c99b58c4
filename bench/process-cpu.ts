import { readdirSync, readFileSync } from 'node:fs';

/** Clock ticks a second of /proc/<pid>/stat's CPU fields (USER_HZ, 100 on Linux). */
const TICKS = 100;

interface Stat {
  pid: number;
  comm: string;
  ppid: number;
  /** utime + stime, seconds */
  own: number;
  /** cutime + cstime: children it has reaped, seconds */
  reaped: number;
}

function stat(pid: number): Stat | null {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // comm is in parentheses and may hold spaces; the fields after it are space-separated
    const close = text.lastIndexOf(')');
    const comm = text.slice(text.indexOf('(') + 1, close);
    const f = text.slice(close + 2).split(' ');
    return { pid, comm, ppid: Number(f[1]), own: (Number(f[11]) + Number(f[12])) / TICKS, reaped: (Number(f[13]) + Number(f[14])) / TICKS };
  } catch {
    return null; // gone
  }
}

/** CPU seconds the given processes have used so far (Linux /proc). */
export function cpuOf(pids: number[]): number {
  return pids.reduce((sum, pid) => sum + (stat(pid)?.own ?? 0), 0);
}

/**
 * CPU seconds every Postgres process on the machine has used so far, exited backends included:
 * a backend's time moves to the postmaster's reaped-children count when it exits.
 */
export function postgresCpu(): number {
  const all = readdirSync('/proc').filter((d) => /^\d+$/.test(d)).map((d) => stat(Number(d))).filter((s): s is Stat => s?.comm === 'postgres');
  const pids = new Set(all.map((s) => s.pid));
  return all.reduce((sum, s) => sum + s.own + (pids.has(s.ppid) ? 0 : s.reaped), 0);
}
