/** A string with ES2024's isWellFormed (Node 20; not yet in the ES2023 lib): false when it holds a lone surrogate. */
type Es2024String = string & { isWellFormed(): boolean };

/**
 * Why Postgres cannot store a string in jsonb or text, or null: a NUL character, or a lone UTF-16
 * surrogate (not valid Unicode). The one rule for inputs, outputs and published documents alike.
 */
export function unstorableText(s: string): string | null {
  if (s.includes('\0')) return 'holds a NUL character (\\u0000)';
  if (!(s as Es2024String).isWellFormed()) return 'holds a lone UTF-16 surrogate (not valid Unicode)';
  return null;
}
