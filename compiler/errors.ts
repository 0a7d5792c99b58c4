import { FlowError } from '../contracts/errors.ts';

/**
 * Stable codes of everything `s8flow compile` and `s8flow publish` report. Each expression code
 * names one unsupported construct, so tests and tooling can match on it.
 */
export const CompileErrorCode = {
  config: 'COMPILE_CONFIG_INVALID',
  noWorkflows: 'COMPILE_NO_WORKFLOWS',
  typeError: 'COMPILE_TYPE_ERROR',
  bundle: 'COMPILE_BUNDLE_FAILED',
  evaluate: 'COMPILE_EVALUATION_FAILED',
  definition: 'COMPILE_DEFINITION_INVALID',
  duplicateVersion: 'COMPILE_DUPLICATE_VERSION',
  logicInvalid: 'COMPILE_LOGIC_INVALID',
  module: 'COMPILE_MODULE_FAILED',
  moduleBuilderMissing: 'COMPILE_MODULE_BUILDER_MISSING',
  lockInvalid: 'COMPILE_LOCK_INVALID',
  versionChangedSafe: 'COMPILE_VERSION_CHANGED_SAFE',
  versionChangedBreaking: 'COMPILE_VERSION_CHANGED_BREAKING',
  exprNotInline: 'COMPILE_EXPR_NOT_INLINE',
  exprClosure: 'COMPILE_EXPR_CLOSURE',
  exprCall: 'COMPILE_EXPR_CALL',
  exprNondeterministic: 'COMPILE_EXPR_NONDETERMINISTIC',
  exprLoop: 'COMPILE_EXPR_LOOP',
  exprStatement: 'COMPILE_EXPR_STATEMENT',
  exprAssignment: 'COMPILE_EXPR_ASSIGNMENT',
  exprOperator: 'COMPILE_EXPR_OPERATOR',
  exprComputedAccess: 'COMPILE_EXPR_COMPUTED_ACCESS',
  exprComputedKey: 'COMPILE_EXPR_COMPUTED_KEY',
  exprParameter: 'COMPILE_EXPR_PARAMETER',
  exprFunction: 'COMPILE_EXPR_FUNCTION',
  exprNew: 'COMPILE_EXPR_NEW',
  exprAsync: 'COMPILE_EXPR_ASYNC',
  exprRegex: 'COMPILE_EXPR_REGEX',
  exprThis: 'COMPILE_EXPR_THIS',
  exprUndefined: 'COMPILE_EXPR_UNDEFINED',
  exprEquality: 'COMPILE_EXPR_EQUALITY',
  exprType: 'COMPILE_EXPR_TYPE',
  exprUnsupported: 'COMPILE_EXPR_UNSUPPORTED',
} as const;
export type CompileErrorCode = (typeof CompileErrorCode)[keyof typeof CompileErrorCode];

export const PublishErrorCode = {
  targetUnsupported: 'PUBLISH_TARGET_UNSUPPORTED',
  sourceInvalid: 'PUBLISH_SOURCE_INVALID',
  versionConflict: 'PUBLISH_VERSION_CONFLICT',
  moduleMismatch: 'PUBLISH_MODULE_MISMATCH',
} as const;
export type PublishErrorCode = (typeof PublishErrorCode)[keyof typeof PublishErrorCode];

/** One problem, optionally at a source position (1-based line and column). */
export interface CompileDiagnostic {
  readonly code: string;
  readonly message: string;
  readonly file?: string;
  readonly line?: number;
  readonly column?: number;
  /** What to do about it. */
  readonly hint?: string;
}

/** `file:line:col - CODE: message` plus the hint on its own line. */
export function formatDiagnostic(d: CompileDiagnostic): string {
  const where = d.file === undefined ? '' : `${d.file}${d.line === undefined ? '' : `:${d.line}:${d.column ?? 1}`} - `;
  return `${where}${d.code}: ${d.message}${d.hint === undefined ? '' : `\n  hint: ${d.hint}`}`;
}

/** The compile failed; `diagnostics` lists every problem found (at least one). */
export class CompileError extends FlowError {
  readonly diagnostics: readonly CompileDiagnostic[];
  constructor(diagnostics: readonly CompileDiagnostic[]) {
    const first = diagnostics[0];
    super(first?.code ?? CompileErrorCode.definition, diagnostics.map(formatDiagnostic).join('\n'), {
      details: diagnostics,
    });
    this.name = 'CompileError';
    this.diagnostics = diagnostics;
  }
}

/** A publish was refused; nothing was copied. */
export class PublishError extends FlowError {
  constructor(code: PublishErrorCode, message: string, details?: unknown) {
    super(code, message, { status: code === PublishErrorCode.versionConflict ? 409 : 400, details });
    this.name = 'PublishError';
  }
}
