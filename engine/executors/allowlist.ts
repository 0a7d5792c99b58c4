import { promises as dns } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

/**
 * Egress allowlists: the hosts the engine may call on someone's say-so. An entry is a hostname
 * (any port), a `host:port`, an IP address, a CIDR block (`10.1.0.0/16`), or `*` (anything — for
 * development only).
 */
export function hostAllowed(allowlist: ReadonlySet<string>, url: URL): boolean {
  if (allowlist.has('*') || allowlist.has(url.host) || allowlist.has(url.hostname)) return true;
  const ip = bare(url.hostname);
  return isIP(ip) !== 0 && blocksOf(allowlist).check(ip, family(ip));
}

/** A comma-separated allowlist (an environment variable's value); empty when unset. */
export function parseAllowlist(value: string | undefined): string[] {
  return (value ?? '')
    .split(',')
    .map((h) => h.trim())
    .filter((h) => h !== '');
}

/** Resolves a hostname to every address it has (`dns.lookup`); tests inject their own. */
export type Resolve = (hostname: string) => Promise<{ address: string; family: number }[]>;

export const systemResolve: Resolve = (hostname) => dns.lookup(hostname, { all: true, verbatim: true });

/**
 * Addresses no public name should lead to: loopback, private, carrier-grade NAT, link-local
 * (cloud metadata at 169.254.169.254), unique-local and unspecified, in IPv4 and IPv6.
 */
const INTERNAL = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.168.0.0', 16],
] as const) {
  INTERNAL.addSubnet(net, prefix, 'ipv4');
  INTERNAL.addSubnet(`::ffff:${net}`, 96 + prefix, 'ipv6');
}
for (const [net, prefix] of [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7],
  ['fe80::', 10],
] as const) {
  INTERNAL.addSubnet(net, prefix, 'ipv6');
}

/**
 * Checks the address an allowlisted hostname resolves to, and returns a `lookup` for the request
 * that answers that very address, so the connection goes where the check looked (no second
 * resolution a rebinding DNS could answer differently). An IP literal needs no resolution.
 *
 * The rule: a hostname on the list may resolve to any public address; to an internal one
 * (`INTERNAL`) only when the list names that address or a CIDR block holding it — or when the
 * hostname is `localhost` and the address is loopback. Every address it resolves to must pass.
 * Returns null when the address is refused.
 */
export async function pinnedLookup(allowlist: ReadonlySet<string>, url: URL, resolve: Resolve): Promise<LookupFunction | null | undefined> {
  const host = bare(url.hostname);
  if (isIP(host) !== 0) return undefined;
  const addresses = await resolve(host);
  if (addresses.length === 0) return null;
  for (const { address } of addresses) if (!addressAllowed(allowlist, host, address)) return null;
  const { address, family: fam } = addresses[0]!;
  return (_hostname, options, callback) => {
    if (options.all) callback(null, [{ address, family: fam }]);
    else callback(null, address, fam);
  };
}

function addressAllowed(allowlist: ReadonlySet<string>, hostname: string, address: string): boolean {
  if (allowlist.has('*')) return true;
  if (!INTERNAL.check(address, family(address))) return true;
  if (hostname.toLowerCase() === 'localhost' && isLoopback(address)) return true;
  return allowlist.has(address) || blocksOf(allowlist).check(address, family(address));
}

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addSubnet('::1', 128, 'ipv6');
LOOPBACK.addSubnet('::ffff:127.0.0.0', 104, 'ipv6');
const isLoopback = (address: string) => LOOPBACK.check(address, family(address));

/** The IP and CIDR entries of an allowlist as a BlockList, built once per list. */
const blockCache = new WeakMap<ReadonlySet<string>, BlockList>();
function blocksOf(allowlist: ReadonlySet<string>): BlockList {
  let blocks = blockCache.get(allowlist);
  if (blocks === undefined) {
    blocks = new BlockList();
    for (const entry of allowlist) {
      const [ip, prefix] = entry.split('/') as [string, string | undefined];
      const addr = bare(ip);
      if (isIP(addr) === 0) continue;
      if (prefix === undefined) blocks.addAddress(addr, family(addr));
      else if (/^\d{1,3}$/.test(prefix)) blocks.addSubnet(addr, Number(prefix), family(addr));
    }
    blockCache.set(allowlist, blocks);
  }
  return blocks;
}

const bare = (host: string) => (host.startsWith('[') ? host.slice(1, -1) : host);
const family = (ip: string): 'ipv4' | 'ipv6' => (isIP(ip) === 6 ? 'ipv6' : 'ipv4');
