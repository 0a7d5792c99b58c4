import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Every namespace of this harness is named `s8net-<pid of the test process>-<run>-<node>`. */
const PREFIX = 's8net-';
/** The benchmarking range (RFC 2544); every address lives only inside the namespaces made here. */
const SUBNET = '198.18.0';

export interface NetNode {
  name: string;
  /** The network namespace it runs in. */
  ns: string;
  /** Its one address, on `eth0`, the end of a veth pair whose other end is on the bridge. */
  addr: string;
}

/** A fault on the traffic between two nodes, or on everything a node sends and receives. */
type Rule = { kind: 'partition'; a: string; b: string } | { kind: 'loss'; node: string; permille: number };

/**
 * A private network of nodes for fault tests: each node a network namespace of its own with one
 * veth to a bridge that lives in a namespace of its own. No namespace has a default route, NAT or
 * a link to the machine's interfaces, so nothing leaves it. Faults are nft rules inside the
 * nodes' namespaces, on arrival (drops, random loss); delay, where the kernel has no netem, is a relay
 * (delay-relay.ts). Unix sockets are not namespaced: the test itself reaches Postgres and the
 * proxy through sockets in their data directories, outside every fault it injects.
 */
export class Net {
  readonly #nodes = new Map<string, NetNode>();
  readonly #rules: Rule[] = [];

  private constructor(readonly prefix: string) {}

  /** Why this machine cannot build the network (null when it can): needs root and `ip netns`. */
  static unavailable(): string | null {
    if (process.platform !== 'linux') return 'network namespaces need Linux';
    if (process.getuid?.() !== 0) return 'network namespaces need root (run as root, as .ci/run does)';
    const probe = `${PREFIX}probe-${process.pid}`;
    try {
      execFileSync('ip', ['netns', 'add', probe], { stdio: 'pipe' });
      execFileSync('ip', ['netns', 'del', probe], { stdio: 'pipe' });
      execFileSync('nft', ['--version'], { stdio: 'pipe' });
    } catch (err) {
      return `ip netns / nft unavailable: ${(err as Error).message.split('\n')[0]}`;
    }
    return null;
  }

  static #runs = 0;

  /** Builds the bridge and one namespace per name, addressed 198.18.0.10, .11, … in order. */
  static async create(names: string[]): Promise<Net> {
    await Net.cleanupLeftovers();
    const net = new Net(`${PREFIX}${process.pid}-${Net.#runs++}-`);
    live.add(net);
    try {
      await net.#build(names);
    } catch (err) {
      await net.destroy();
      throw err;
    }
    return net;
  }

  async #build(names: string[]): Promise<void> {
    const br = `${this.prefix}br`;
    await ip('netns', 'add', br);
    await ip('-n', br, 'link', 'add', 'br0', 'type', 'bridge');
    await ip('-n', br, 'link', 'set', 'br0', 'up');
    for (const [i, name] of names.entries()) {
      const node: NetNode = { name, ns: `${this.prefix}${name}`, addr: `${SUBNET}.${10 + i}` };
      await ip('netns', 'add', node.ns);
      // made inside the namespaces: the machine's own namespace never holds either end
      await ip('-n', br, 'link', 'add', `v${i}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', node.ns);
      await ip('-n', br, 'link', 'set', `v${i}`, 'master', 'br0', 'up');
      await ip('-n', node.ns, 'addr', 'add', `${node.addr}/24`, 'dev', 'eth0');
      await ip('-n', node.ns, 'link', 'set', 'eth0', 'up');
      await ip('-n', node.ns, 'link', 'set', 'lo', 'up');
      this.#nodes.set(name, node);
    }
  }

  node(name: string): NetNode {
    const n = this.#nodes.get(name);
    if (n === undefined) throw new Error(`no node ${name}`);
    return n;
  }

  /** The command prefix that runs a program inside a node's namespace. */
  exec(name: string): string[] {
    return ['ip', 'netns', 'exec', this.node(name).ns];
  }

  /** Drops every packet between two nodes, both ways, silently (no reset: connections hang, as across a real partition). */
  async partition(a: string, b: string): Promise<void> {
    this.#rules.push({ kind: 'partition', a, b });
    await this.#applyAll();
  }

  /** Drops `permille` of the packets a node sends and of those it receives, at random. */
  async loss(node: string, permille: number): Promise<void> {
    this.#rules.push({ kind: 'loss', node, permille });
    await this.#applyAll();
  }

  /** Removes every fault. */
  async heal(): Promise<void> {
    this.#rules.length = 0;
    await this.#applyAll();
  }

  /** Kills whatever still runs in the namespaces and removes them. */
  async destroy(): Promise<void> {
    await removeNamespaces((ns) => ns.startsWith(this.prefix));
    live.delete(this);
  }

  /** Removes namespaces a test process that has died left behind (its pid is in their names). */
  static async cleanupLeftovers(): Promise<void> {
    await removeNamespaces((ns) => {
      const pid = Number(ns.slice(PREFIX.length).split('-')[0]);
      return Number.isInteger(pid) && pid !== process.pid && !alive(pid);
    });
  }

  /**
   * Rewrites every node's one nft table from the rules (atomically per node: nft -f). Packets are
   * dropped where they arrive, never where they leave: a packet dropped on its own node's output
   * fails the sending call at once (EPERM), which no real network does.
   */
  async #applyAll(): Promise<void> {
    for (const { name } of this.#nodes.values()) {
      const drops: string[] = [];
      for (const r of this.#rules) {
        if (r.kind === 'partition' && (r.a === name || r.b === name)) drops.push(`ip saddr ${this.node(r.a === name ? r.b : r.a).addr} drop`);
        if (r.kind === 'loss' && r.node === name) drops.push(`iifname "eth0" numgen random mod 1000 < ${r.permille} drop`);
        if (r.kind === 'loss' && r.node !== name) drops.push(`ip saddr ${this.node(r.node).addr} numgen random mod 1000 < ${r.permille} drop`);
      }
      const chain = drops.length === 0 ? [] : ['table inet s8fault {', '  chain in { type filter hook input priority 0;', ...drops.map((d) => `    ${d};`), '  }', '}'];
      // "table; delete table" makes the script idempotent: it replaces whatever was there
      const script = ['table inet s8fault', 'delete table inet s8fault', ...chain].join('\n');
      await new Promise<void>((resolve, reject) => {
        const child = execFile('ip', [...this.exec(name).slice(1), 'nft', '-f', '-'], (err) => (err ? reject(err) : resolve()));
        child.stdin!.end(`${script}\n`);
      });
    }
  }
}

async function ip(...args: string[]): Promise<void> {
  await run('ip', args);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function namespaces(): string[] {
  const out = execFileSync('ip', ['netns', 'list']).toString();
  return out
    .split('\n')
    .map((l) => l.split(' ')[0]!)
    .filter((ns) => ns.startsWith(PREFIX));
}

/** SIGKILLs every process in each chosen namespace, then deletes it (synchronous: also runs at exit). */
function removeNamespacesSync(which: (ns: string) => boolean): void {
  for (const ns of namespaces().filter(which)) {
    try {
      const pids = execFileSync('ip', ['netns', 'pids', ns]).toString().split('\n').filter(Boolean);
      for (const pid of pids) {
        try {
          process.kill(Number(pid), 'SIGKILL');
        } catch {}
      }
      execFileSync('ip', ['netns', 'del', ns], { stdio: 'ignore' });
    } catch {}
  }
}

async function removeNamespaces(which: (ns: string) => boolean): Promise<void> {
  removeNamespacesSync(which);
}

/** Networks still up when the test process exits are removed, so none outlives a crashed run. */
const live = new Set<Net>();
process.once('exit', () => {
  for (const net of live) removeNamespacesSync((ns) => ns.startsWith(net.prefix));
});
