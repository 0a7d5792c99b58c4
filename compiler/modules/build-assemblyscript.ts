import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { main as asc } from 'assemblyscript/asc';
import { type WasmBuildDiagnostic, WasmBuildError } from './errors.ts';

/** The guest library's abort handler; every module gets it through `--use abort=`. */
const GUEST_ABORT = fileURLToPath(new URL('../../host-functions/guest/abort.ts', import.meta.url));
/**
 * Package paths asc resolves onto this repository, so a module anywhere imports the guest library
 * as `sentin8-flow/guest` (package.json `exports` says the same to editors). asc looks a package
 * import up as `<dir>/<package>/<subpath>.ts` or `…/<subpath>/index.ts` in each `--path` dir;
 * `PACKAGE_ROOT` is such a dir that exists only in `readFile` below.
 */
const PACKAGE_ROOT = fileURLToPath(new URL('../../.asc-packages', import.meta.url));
const PACKAGES_HERE: Record<string, string> = {
  'sentin8-flow/guest': path.dirname(GUEST_ABORT),
};
/** The file a read under PACKAGE_ROOT stands for, or the path itself. */
function packageFile(full: string): string {
  if (!full.startsWith(PACKAGE_ROOT + path.sep)) return full;
  const inside = full.slice(PACKAGE_ROOT.length + 1).split(path.sep).join('/');
  for (const [name, dir] of Object.entries(PACKAGES_HERE)) {
    // `<name>.ts` stays missing: asc then reads `<name>/index.ts`, and the library's relative imports resolve inside it
    if (inside.startsWith(`${name}/`)) return path.join(dir, inside.slice(name.length + 1));
  }
  return full;
}
/** The node_modules holding @extism/as-pdk, for entries outside this repository. */
const PACKAGES = path.dirname(path.dirname(path.dirname(createRequire(import.meta.url).resolve('@extism/as-pdk/package.json'))));
const DEFAULT_MAXIMUM_MEMORY_PAGES = 256;
const ERROR_CATEGORY = 3; // DiagnosticCategory.Error in assemblyscript/src/diagnostics

export interface BuildAssemblyScriptOptions {
  /** The module's entry source (`.ts` or `.as.ts`). Its exported functions become the module's exports. */
  entry: string;
  /** The artifact directory; the module is written to `<outDir>/modules/<sha256>.wasm`. */
  outDir: string;
  /** `--maximumMemory` in 64 KiB pages; must not exceed the engine's cap. (Default: 256 = 16 MiB) */
  maximumMemoryPages?: number;
}

export interface BuiltModule {
  /** Hex sha256 of the wasm bytes, the module's identity in a LogicVersion. */
  sha256: string;
  /** `<outDir>/modules/<sha256>.wasm` */
  path: string;
  /** Size of the binary in bytes. */
  bytes: number;
}

let queue: Promise<unknown> = Promise.resolve();

/**
 * Compiles an AssemblyScript step module with the local asc (`-O --noAssert`,
 * the guest abort handler, a memory maximum). The same source and options
 * give the same bytes, hence the same hash. Builds run one at a time: asc
 * keeps global state. Throws {@link WasmBuildError} (COMPILE_WASM_BUILD) with
 * file:line:col for each asc error.
 */
export function buildAssemblyScriptModule(opts: BuildAssemblyScriptOptions): Promise<BuiltModule> {
  const run = queue.then(() => build(opts));
  queue = run.catch(() => undefined);
  return run;
}

async function build(opts: BuildAssemblyScriptOptions): Promise<BuiltModule> {
  const entry = path.resolve(opts.entry);
  const pages = opts.maximumMemoryPages ?? DEFAULT_MAXIMUM_MEMORY_PAGES;
  if (!Number.isInteger(pages) || pages < 1 || pages > 65536) {
    throw new RangeError(`maximumMemoryPages must be an integer in 1..65536, got ${pages}`);
  }
  // Paths inside the binary (abort messages name source files) are relative to
  // baseDir, so a repository-relative baseDir keeps hashes stable across checkouts.
  const baseDir = commonDir(path.dirname(entry), path.dirname(GUEST_ABORT));
  const rel = (file: string) => path.relative(baseDir, file).split(path.sep).join('/');
  const abortName = `${rel(GUEST_ABORT).replace(/\.ts$/, '')}/guestAbort`;
  const sources = new Map<string, string>();
  const diagnostics: WasmBuildDiagnostic[] = [];
  let binary: Uint8Array | null = null;

  const result = await asc(
    [rel(entry), rel(GUEST_ABORT), '--outFile', 'module.wasm', '--baseDir', baseDir, '-O', '--noAssert',
      '--use', `abort=${abortName}`, '--maximumMemory', String(pages), '--path', PACKAGES, '--path', PACKAGE_ROOT, '--noColors'],
    {
      readFile: async (file, dir) => {
        try {
          const text = await readFile(packageFile(path.resolve(dir, file)), 'utf8');
          sources.set(file.split(path.sep).join('/'), text);
          return text;
        } catch {
          return null;
        }
      },
      writeFile: (_file, contents) => {
        binary = typeof contents === 'string' ? new TextEncoder().encode(contents) : contents;
      },
      listFiles: () => [],
      reportDiagnostic: (d) => {
        if (d.category !== ERROR_CATEGORY) return;
        const file = d.range?.source.normalizedPath ?? '';
        const { line, column } = locate(sources, file, d.range?.start ?? 0);
        const shown = file === '' || file.startsWith('~lib/') ? file : path.resolve(baseDir, file);
        diagnostics.push({ file: shown, line, column, code: d.code, message: d.message });
      },
    },
  );
  const wasm = binary as Uint8Array | null;
  if (result.error !== null || wasm === null) {
    throw new WasmBuildError(opts.entry, diagnostics, diagnostics.length === 0 ? String(result.error?.message ?? 'no output') : undefined);
  }
  const sha256 = createHash('sha256').update(wasm).digest('hex');
  const dir = path.join(opts.outDir, 'modules');
  const file = path.join(dir, `${sha256}.wasm`);
  await mkdir(dir, { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  await writeFile(tmp, wasm);
  await rename(tmp, file);
  return { sha256, path: file, bytes: wasm.byteLength };
}

/** 1-based line and column of `offset` in a source asc read. */
function locate(sources: Map<string, string>, file: string, offset: number): { line: number; column: number } {
  let text = sources.get(file);
  if (text === undefined && file.startsWith('~lib/')) {
    const tail = `/${file.slice('~lib/'.length)}`;
    for (const [name, source] of sources) if (name.endsWith(tail)) text = source;
  }
  if (text === undefined) return { line: 0, column: 0 };
  const before = text.slice(0, offset).split('\n');
  return { line: before.length, column: (before.at(-1)?.length ?? 0) + 1 };
}

function commonDir(a: string, b: string): string {
  const pa = a.split(path.sep);
  const pb = b.split(path.sep);
  let i = 0;
  while (i < pa.length && i < pb.length && pa[i] === pb[i]) i++;
  return pa.slice(0, i).join(path.sep) || path.sep;
}
