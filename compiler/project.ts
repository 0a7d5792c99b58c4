import { type Diagnostic, Project, type SourceFile, ts } from 'ts-morph';
import type { CompileDiagnostic } from './errors.ts';
import { CompileErrorCode } from './errors.ts';

/** A ts-morph project with the author's compiler options; files are added explicitly. */
export function createTsProject(tsConfigFilePath: string | null): Project {
  return tsConfigFilePath === null
    ? new Project({ compilerOptions: { strict: true, target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, allowImportingTsExtensions: true, noEmit: true, skipLibCheck: true } })
    : new Project({ tsConfigFilePath, skipAddingFilesFromTsConfig: true });
}

/** Syntactic and semantic TypeScript errors located in `files`, each at file:line:col. */
export function typeDiagnostics(files: readonly SourceFile[], label: (sf: SourceFile) => string): CompileDiagnostic[] {
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
