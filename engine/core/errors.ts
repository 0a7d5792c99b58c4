import { FlowError } from '../../contracts/errors.ts';

/** Refusals of the core: the request does not fit the instance's current state. Nothing changed. */
export class Refused extends FlowError {
  constructor(code: string, message: string, status = 409) {
    super(code, message, { status });
  }
}
