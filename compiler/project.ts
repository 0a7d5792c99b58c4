import type { CompilerOptions, Diagnostic, SourceFile } from 'ts-morph';
import { Project, ts } from './ts-morph.ts';
import type { CompileDiagnostic } from './errors.ts';
import { CompileErrorCode } from './errors.ts';

/**
 * The TypeScript projects a session type-checks and translates in.
 *
 * Definitions are checked first in a lean project: the author's compiler options with `types: []`,
 * so the ambient `@types/*` packages (`@types/node` alone is ~2 MB of declarations, most of a cold
 * compile's parse and bind time) are not loaded; what a definition imports is still resolved.
 * Extra ambient declarations can only make more code type-check, so a definition clean in the lean
 * project is taken as clean under the author's options. The first time the lean project reports an
 * error, the session moves for good to a project with the author's options unchanged and checks
 * again there: every diagnostic an author sees comes from their own options, and a definition that
 * needs ambient types (`process`, `node:*` modules) compiles as before, at the old cold cost.
 */
export interface TsProjects {
  /** The project definitions are currently checked and translated in. */
  readonly current: Project;
  /** The definition file `path` in the current project, added on first use. */
  source(path: string): SourceFile;
  /** Re-reads `paths` from disk in every project that holds them. */
  refresh(paths: Iterable<string>): void;
  /** TypeScript errors in `paths`; true in `switched` when this call moved to the author's project. */
  check(paths: readonly string[], label: (sf: SourceFile) => string): { diagnostics: CompileDiagnostic[]; switched: boolean };
}

export function createTsProjects(tsConfigFilePath: string | null): TsProjects {
  let current = createTsProject(tsConfigFilePath, { types: [] });
  let lean = true;
  const source = (path: string) => current.getSourceFile(path) ?? current.addSourceFileAtPath(path);
  return {
    get current() {
      return current;
    },
    source,
    refresh(paths) {
      for (const path of paths) current.getSourceFile(path)?.refreshFromFileSystemSync();
    },
    check(paths, label) {
      const diagnostics = typeDiagnostics(paths.map(source), label);
      if (diagnostics.length === 0 || !lean) return { diagnostics, switched: false };
      current = createTsProject(tsConfigFilePath, {});
      lean = false;
      return { diagnostics: typeDiagnostics(paths.map(source), label), switched: true };
    },
  };
}

/** A ts-morph project with the author's compiler options and `overrides`; files are added explicitly. */
function createTsProject(tsConfigFilePath: string | null, overrides: CompilerOptions): Project {
  return tsConfigFilePath === null
    ? new Project({
        compilerOptions: {
          strict: true,
          target: ts.ScriptTarget.ES2022,
          module: ts.ModuleKind.NodeNext,
          moduleResolution: ts.ModuleResolutionKind.NodeNext,
          allowImportingTsExtensions: true,
          noEmit: true,
          skipLibCheck: true,
          ...overrides,
        },
      })
    : new Project({ tsConfigFilePath, skipAddingFilesFromTsConfig: true, compilerOptions: overrides });
}

/** Syntactic and semantic TypeScript errors located in `files`, each at file:line:col. */
function typeDiagnostics(files: readonly SourceFile[], label: (sf: SourceFile) => string): CompileDiagnostic[] {
  const out: CompileDiagnostic[] = [];
  for (const sf of files) {
    for (const d of sf.getPreEmitDiagnostics()) {
      if (d.getCategory() !== ts.DiagnosticCategory.Error) continue;
      out.push(toDiagnostic(d, sf, label));
    }
  }
  return out;
}

function toDiagnostic(d: Diagnostic, fallback: SourceFile, label: (sf: SourceFile) => string): CompileDiagnostic {
  const sf = d.getSourceFile() ?? fallback;
  const { line, column } = sf.getLineAndColumnAtPos(d.getStart() ?? 0);
  const text = d.getMessageText();
  const message = typeof text === 'string' ? text : ts.flattenDiagnosticMessageText(text.compilerObject, '\n');
  return { code: CompileErrorCode.typeError, message: `TS${d.getCode()}: ${message}`, file: label(sf), line, column };
}
