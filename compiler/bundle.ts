import { createRequire } from 'node:module';
import { dirname, resolve } from 'node:path';
import * as esbuild from 'esbuild';
import { withCodeCache } from './code-cache.ts';
import { CompileError, type CompileDiagnostic, CompileErrorCode } from './errors.ts';

/**
 * Bundles definition modules with esbuild and evaluates them in this process.
 *
 * The bundles are CommonJS with `zod` left external: every bundle then shares the one zod that
 * Node's `require` loads, so the SDK's `z.toJSONSchema` sees the author's schemas as its own, and
 * nothing is written to disk. Each entry has its own incremental esbuild context, so a watch-mode
 * change rebuilds only the definitions it touches.
 */
export interface Bundler {
  /** Rebuilds `entries`; returns each one's code and the files it depends on. */
  build(entries: readonly string[]): Promise<Map<string, { code: string; inputs: string[] }>>;
  dispose(): Promise<void>;
}

export function createBundler(loadSource: (file: string) => string | undefined, absWorkingDir: string): Bundler {
  const plugin: esbuild.Plugin = {
    name: 'sentin8-flow-instrument',
    setup(build) {
      build.onLoad({ filter: /\.ts$/ }, (args) => {
        const contents = loadSource(args.path);
        return contents === undefined ? undefined : { contents, loader: 'ts' };
      });
    },
  };
  const contexts = new Map<string, Promise<esbuild.BuildContext<{ write: false; metafile: true; outfile: string }>>>();
  const contextOf = (entry: string) => {
    let ctx = contexts.get(entry);
    if (ctx === undefined) {
      ctx = esbuild.context({
        entryPoints: [entry],
        absWorkingDir,
        bundle: true,
        format: 'cjs',
        platform: 'node',
        target: 'node20',
        external: ['zod'],
        write: false,
        outfile: '/virtual-out/bundle.js',
        metafile: true,
        logLevel: 'silent',
        plugins: [plugin],
      });
      contexts.set(entry, ctx);
    }
    return ctx;
  };
  return {
    async build(entries) {
      const built = await Promise.all(
        entries.map(async (entry) => {
          let result: esbuild.BuildResult<{ write: false; metafile: true }>;
          try {
            result = await (await contextOf(entry)).rebuild();
          } catch (err) {
            throw bundleFailure(err);
          }
          const inputs = Object.keys(result.metafile.inputs).map((i) => resolveFrom(absWorkingDir, i));
          return [entry, { code: result.outputFiles?.[0]?.text ?? '', inputs }] as const;
        }),
      );
      return new Map(built);
    },
    async dispose() {
      await Promise.all([...contexts.values()].map(async (c) => (await c).dispose()));
    },
  };
}

function resolveFrom(dir: string, p: string): string {
  return resolve(dir, p);
}

function bundleFailure(err: unknown): CompileError {
  const errors = (err as { errors?: esbuild.Message[] }).errors ?? [];
  const diagnostics: CompileDiagnostic[] = errors.map((e) => ({
    code: CompileErrorCode.bundle,
    message: e.text,
    ...(e.location ? { file: e.location.file, line: e.location.line, column: e.location.column + 1 } : {}),
  }));
  return new CompileError(diagnostics.length > 0 ? diagnostics : [{ code: CompileErrorCode.bundle, message: String(err) }]);
}

/** Runs a CommonJS bundle as if it were the module `file`; returns its exports. */
export function evaluateBundle(code: string, file: string): Record<string, unknown> {
  const module = { exports: {} as Record<string, unknown> };
  const run = new Function('module', 'exports', 'require', '__filename', '__dirname', code);
  // The bundle's own code runs from a string; what it requires (zod) loads through the code cache.
  withCodeCache(() => run(module, module.exports, createRequire(file), file, dirname(file)));
  return module.exports;
}

/** Bundles and evaluates one standalone module (such as flow.config.ts). */
export async function evaluateStandalone(file: string): Promise<Record<string, unknown>> {
  let result: esbuild.BuildResult;
  try {
    result = await esbuild.build({ entryPoints: [file], bundle: true, format: 'cjs', platform: 'node', write: false, logLevel: 'silent', external: ['zod'] });
  } catch (err) {
    throw bundleFailure(err);
  }
  return evaluateBundle(result.outputFiles?.[0]?.text ?? '', file);
}
