/**
 * The base of every error Sentin8 Flow raises on purpose. `code` is stable (documented in
 * docs/errors.md); `status` is set where the error can reach HTTP; messages say what to do next.
 */
export class FlowError extends Error {
  readonly code: string;
  readonly status: number;
  readonly details: unknown;

  constructor(code: string, message: string, opts: { status?: number; details?: unknown; cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'FlowError';
    this.code = code;
    this.status = opts.status ?? 400;
    this.details = opts.details;
  }
}

/** One problem found in a LogicVersion: where (a JSON path such as `steps.reserve.next`) and what. */
export interface LogicVersionIssue {
  code: string;
  path: string;
  message: string;
}

export class LogicVersionInvalid extends FlowError {
  readonly issues: LogicVersionIssue[];
  constructor(logicLabel: string, issues: LogicVersionIssue[]) {
    const lines = issues.map((i) => `  ${i.path || '(root)'}: ${i.message} [${i.code}]`).join('\n');
    super('FLOW_LOGIC_INVALID', `LogicVersion ${logicLabel} is invalid:\n${lines}`, { status: 422, details: issues });
    this.issues = issues;
  }
}

/** Codes of the individual LogicVersion checks (each `LogicVersionIssue.code`). */
export const LogicIssueCode = {
  schema: 'FLOW_LV_SCHEMA',
  unknownTarget: 'FLOW_LV_UNKNOWN_STEP',
  unreachable: 'FLOW_LV_UNREACHABLE_STEP',
  unknownModule: 'FLOW_LV_UNKNOWN_MODULE',
  exprSyntax: 'FLOW_LV_EXPR_SYNTAX',
  exprForbidden: 'FLOW_LV_EXPR_FORBIDDEN',
  hashMismatch: 'FLOW_LV_HASH_MISMATCH',
  reservedHeader: 'FLOW_LV_RESERVED_HEADER',
  unknownMessage: 'FLOW_LV_UNKNOWN_MESSAGE',
  unstorable: 'FLOW_LV_UNSTORABLE',
} as const;
