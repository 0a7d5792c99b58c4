/**
 * Egress allowlists: the hosts the engine may call on someone's say-so. An entry is a hostname
 * (any port), a `host:port`, or `*` (anything — for development only).
 */
export function hostAllowed(allowlist: ReadonlySet<string>, url: URL): boolean {
  return allowlist.has('*') || allowlist.has(url.host) || allowlist.has(url.hostname);
}

/** A comma-separated allowlist (an environment variable's value); empty when unset. */
export function parseAllowlist(value: string | undefined): string[] {
  return (value ?? '')
    .split(',')
    .map((h) => h.trim())
    .filter((h) => h !== '');
}
