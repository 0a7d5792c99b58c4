import type { Node } from 'ts-morph';
import { type CompileDiagnostic, CompileErrorCode } from '../errors.ts';

const FUNC_HINT = 'move computation into a func step (a WASM module), or precompute it in an earlier step';

/** A construct the translator cannot turn into JSONata, at its exact node. */
export class ExprError extends Error {
  readonly code: CompileErrorCode;
  readonly node: Node;
  readonly hint: string;
  constructor(code: CompileErrorCode, node: Node, message: string, hint: string = FUNC_HINT) {
    super(message);
    this.code = code;
    this.node = node;
    this.hint = hint;
  }

  /** Position as 1-based line and column in `fileLabel`. */
  toDiagnostic(fileLabel: string): CompileDiagnostic {
    const sf = this.node.getSourceFile();
    const { line, column } = sf.getLineAndColumnAtPos(this.node.getStart());
    return { code: this.code, message: this.message, file: fileLabel, line, column, hint: this.hint };
  }
}

/** The source text of a node, shortened for messages. */
export function snippet(node: Node): string {
  const text = node.getText().replace(/\s+/g, ' ');
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

/** A clock or randomness read in a mapping: refused, because a replay would decide differently. */
export function nondeterministic(node: Node, what: string): ExprError {
  return new ExprError(
    CompileErrorCode.exprNondeterministic,
    node,
    `${what} is not deterministic: a replay would decide differently`,
    'pass times and random values in the workflow input, or use a delay step for waiting',
  );
}
