import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Net } from './netns.ts';

/** A helper program (service, relay) run with tsx inside a node's namespace. */
export class NetProcess {
  readonly output: string[] = [];
  readonly exited: Promise<void>;

  private constructor(readonly child: ChildProcess) {
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
    const keep = (chunk: Buffer) => {
      this.output.push(...chunk.toString('utf8').split('\n').filter(Boolean));
      if (this.output.length > 200) this.output.splice(0, this.output.length - 200);
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
  }

  /** Starts `script` (a path relative to this folder) in `node`'s namespace; resolves on its "ready" line. */
  static async start(net: Net, node: string, script: string, args: string[], env: Record<string, string> = {}): Promise<NetProcess> {
    const path = fileURLToPath(new URL(script, import.meta.url));
    const [cmd, ...pre] = net.exec(node);
    const child = spawn(cmd!, [...pre, process.execPath, '--import', 'tsx', path, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    const p = new NetProcess(child);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${script} in ${node} not ready:\n${p.output.join('\n')}`)), 30_000);
      child.stdout!.on('data', (c: Buffer) => {
        if (c.toString().includes(' ready ')) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('exit', () => {
        clearTimeout(timer);
        reject(new Error(`${script} in ${node} exited:\n${p.output.join('\n')}`));
      });
    });
    return p;
  }

  signal(sig: NodeJS.Signals): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(sig);
  }

  async kill(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.kill('SIGKILL');
    await this.exited;
  }
}
