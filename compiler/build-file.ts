import { logicVersionHash } from '../contracts/canonical-json.ts';
import { LogicVersionInvalid } from '../contracts/errors.ts';
import type { LogicVersion } from '../contracts/logic-version.ts';
import { parseLogicVersion } from '../contracts/validate.ts';
import { isWorkflow } from '../sdk/is-workflow.ts';
import { evaluateBundle } from './bundle.ts';
import { type CompileDiagnostic, CompileError, CompileErrorCode } from './errors.ts';
import { lowerDraft, type MappingSource } from './lower.ts';
import { buildModule } from './module-build.ts';
import { COMPILER_VERSION } from './version.ts';

/** One compiled LogicVersion and the source it came from. */
export interface BuiltVersion {
  readonly doc: LogicVersion;
  /** The definition file, relative to the project root. */
  readonly source: string;
  /** The export that holds the definition. */
  readonly exportName: string;
}

export interface FileResult {
  readonly versions: BuiltVersion[];
  readonly modules: Map<string, Uint8Array>;
  readonly diagnostics: CompileDiagnostic[];
}

/**
 * Evaluates one bundled definition module and compiles every exported workflow in it: mappings to
 * JSONata, modules to binaries, then hash and contract validation.
 */
export async function buildFile(file: string, label: string, code: string, source: MappingSource): Promise<FileResult> {
  const result: FileResult = { versions: [], modules: new Map(), diagnostics: [] };
  let exports: Record<string, unknown>;
  try {
    exports = evaluateBundle(code, file);
  } catch (err) {
    result.diagnostics.push(evaluationDiagnostic(err, label, 'evaluating the module'));
    return result;
  }
  for (const name of Object.keys(exports).sort()) {
    const value = exports[name];
    if (!isWorkflow(value)) continue;
    let draft: ReturnType<typeof value.definition>;
    try {
      draft = value.definition();
    } catch (err) {
      result.diagnostics.push(evaluationDiagnostic(err, label, `export "${name}"`));
      continue;
    }
    const before = result.diagnostics.length;
    const lowered = lowerDraft(draft, label, source, result.diagnostics);
    const modules: Record<string, { sha256: string; imports: Record<string, unknown> }> = {};
    for (const mod of draft.modules) {
      try {
        const built = await buildModule(mod, file, label);
        result.modules.set(built.sha256, built.bytes);
        modules[mod.name] = { sha256: built.sha256, imports: { ...mod.imports } };
      } catch (err) {
        if (!(err instanceof CompileError)) throw err;
        result.diagnostics.push(...err.diagnostics);
      }
    }
    if (result.diagnostics.length > before) continue;
    const doc: Record<string, unknown> = {
      ...lowered,
      ...(draft.modules.length === 0 ? {} : { modules }),
      source: { file: label, compiler: COMPILER_VERSION },
    };
    doc['hash'] = logicVersionHash(doc);
    try {
      result.versions.push({ doc: parseLogicVersion(doc), source: label, exportName: name });
    } catch (err) {
      if (!(err instanceof LogicVersionInvalid)) throw err;
      for (const issue of err.issues) {
        result.diagnostics.push({
          code: CompileErrorCode.logicInvalid,
          message: `${draft.logicId}@${draft.version} ${issue.path}: ${issue.message} [${issue.code}]`,
          file: label,
        });
      }
    }
  }
  return result;
}

function evaluationDiagnostic(err: unknown, label: string, what: string): CompileDiagnostic {
  const e = err as { code?: unknown; message?: string };
  if (typeof e.code === 'string' && e.code.startsWith('SDK_')) {
    return { code: CompileErrorCode.definition, message: `${what}: ${e.message} [${e.code}]`, file: label };
  }
  return {
    code: CompileErrorCode.evaluate,
    message: `${what} threw: ${e.message ?? String(err)}`,
    file: label,
    hint: 'a definition module runs at compile time; keep its top level free of I/O',
  };
}
