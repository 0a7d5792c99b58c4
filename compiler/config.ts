import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { CompileError, CompileErrorCode } from './errors.ts';
import { evaluateStandalone } from './bundle.ts';

/** Where workflow sources live and where artifacts go; all paths relative to the project root. */
export interface FlowConfig {
  /** Directories searched for exported workflow definitions. (Default: ["."]) */
  roots: readonly string[];
  /** Artifact directory. (Default: "dist/flow") */
  out: string;
  /** The version lock. (Default: "flow.lock.json") */
  lock: string;
}

const DEFAULT_CONFIG: FlowConfig = { roots: ['.'], out: 'dist/flow', lock: 'flow.lock.json' };

/**
 * Reads `flow.config.ts` (default export) or the `sentin8Flow` field of package.json in `root`;
 * without either, the root itself is searched.
 */
export async function loadConfig(root: string): Promise<FlowConfig> {
  const tsConfig = join(root, 'flow.config.ts');
  if (existsSync(tsConfig)) {
    const exported = (await evaluateStandalone(tsConfig)) as { default?: unknown };
    return checkConfig(exported.default ?? exported, tsConfig);
  }
  const pkg = join(root, 'package.json');
  if (existsSync(pkg)) {
    const field = (JSON.parse(readFileSync(pkg, 'utf8')) as Record<string, unknown>)['sentin8Flow'];
    if (field !== undefined) return checkConfig(field, `${pkg} "sentin8Flow"`);
  }
  return DEFAULT_CONFIG;
}

function checkConfig(value: unknown, where: string): FlowConfig {
  const v = (value ?? {}) as Record<string, unknown>;
  const roots = v['roots'] ?? DEFAULT_CONFIG.roots;
  const ok =
    typeof value === 'object' &&
    Array.isArray(roots) &&
    roots.every((r) => typeof r === 'string') &&
    ['out', 'lock'].every((k) => v[k] === undefined || typeof v[k] === 'string');
  if (!ok) {
    throw new CompileError([
      { code: CompileErrorCode.config, message: `${where}: expected { roots?: string[], out?: string, lock?: string }` },
    ]);
  }
  return {
    roots: roots as string[],
    out: (v['out'] as string | undefined) ?? DEFAULT_CONFIG.out,
    lock: (v['lock'] as string | undefined) ?? DEFAULT_CONFIG.lock,
  };
}

/** The nearest tsconfig.json at or above `dir`, or null. */
export function findTsConfig(dir: string): string | null {
  let current = resolve(dir);
  for (;;) {
    const candidate = join(current, 'tsconfig.json');
    if (existsSync(candidate)) return candidate;
    const parent = dirname(current);
    if (parent === current) return null;
    current = parent;
  }
}
