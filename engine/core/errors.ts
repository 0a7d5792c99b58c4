import { FlowError } from '../../contracts/errors.ts';
import type { FlowErrorBody } from '../../contracts/index.ts';

/** Refusals of the core: the request does not fit the instance's current state. Nothing changed. */
export class Refused extends FlowError {
  constructor(code: string, message: string, status = 409) {
    super(code, message, { status });
  }
}

/** A callback repeated with another body than the one applied for its attempt. */
export class CallbackAnsweredDifferently extends Refused {
  constructor(workflowId: string) {
    super(
      'FLOW_CALLBACK_ANSWERED_DIFFERENTLY',
      `workflow ${workflowId} already took a different completion for this resume token; a token is answered once, and only a repeat of the same body answers again`,
    );
  }
}

/**
 * An expression of the definition failed at run time (a JSONata type error, `$number("x")`, a
 * runaway that met the evaluation budget). Re-evaluating gives the same result, so it is a
 * permanent failure of the step it belongs to: the core records it and takes `onError`, or fails
 * the workflow — it never escapes the core. `field` says which expression of the step failed.
 */
export class ExpressionFailed extends FlowError {
  constructor(
    readonly field: string,
    code: 'FLOW_EXPR_FAILED' | 'FLOW_EXPR_BUDGET_EXCEEDED',
    message: string,
  ) {
    super(code, message, { status: 422 });
  }

  /** The step error recorded for it: the location (step, field) and JSONata's own message. */
  bodyAt(step: string | undefined): FlowErrorBody {
    const where = step === undefined ? this.field : `step ${step}, ${this.field}`;
    return { code: this.code, message: `${where}: ${this.message}`, field: this.field, ...(step === undefined ? {} : { step }) };
  }
}

/**
 * A step's delay, deadline or `until` that the engine cannot schedule: longer than MAX_WAIT_MS, or
 * a date outside the years 1 to 9999 (core/storable.ts). The same every time, so a permanent
 * failure of the step, routed as any failure of its entry.
 */
export class TimeOutOfRange extends FlowError {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super('FLOW_TIME_OUT_OF_RANGE', message, { status: 422 });
  }

  bodyAt(step: string | undefined): FlowErrorBody {
    return { code: this.code, message: `${step === undefined ? '' : `step ${step}, `}${this.field}: ${this.message}`, field: this.field, ...(step === undefined ? {} : { step }) };
  }
}

/** A value of a search attribute that its type, or any type, refuses. A permanent failure of what set it. */
export class AttributeInvalid extends FlowError {
  constructor(
    readonly attribute: string,
    message: string,
  ) {
    super('FLOW_ATTRIBUTE_INVALID', `attribute ${attribute}: ${message}`, { status: 422 });
  }

  bodyAt(step: string | undefined): FlowErrorBody {
    return { code: this.code, message: `${step === undefined ? '' : `step ${step}, `}${this.message}`, field: `attributes.${this.attribute}`, ...(step === undefined ? {} : { step }) };
  }
}

/**
 * What any error thrown while the core enters a step becomes: an expression failure keeps its
 * code and field; anything else (a definition the core cannot follow) is FLOW_STEP_ENTRY_FAILED.
 * Either way a permanent step error, so no exception reaches the worker loop.
 */
export function stepErrorOf(err: unknown, step: string | undefined, field?: string): FlowErrorBody {
  if (err instanceof ExpressionFailed || err instanceof TimeOutOfRange || err instanceof AttributeInvalid) return err.bodyAt(step);
  const message = err instanceof Error ? err.message : String(err);
  return {
    code: 'FLOW_STEP_ENTRY_FAILED',
    message: `${step === undefined ? '' : `step ${step}`}${field === undefined ? '' : `, ${field}`}: ${message}`,
    ...(step === undefined ? {} : { step }),
    ...(field === undefined ? {} : { field }),
  };
}
