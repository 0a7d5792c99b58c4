/**
 * The compiler's version, recorded in `source.compiler` (informational: not part of the hash) and in
 * manifest.json. A constant rather than read from package.json, so output is the same wherever it runs.
 */
export const COMPILER_VERSION = '0.1.0';
