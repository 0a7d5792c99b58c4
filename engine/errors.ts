import { FlowError } from '../contracts/errors.ts';

export class BadRequest extends FlowError {
  constructor(what: string, problems: string[]) {
    super('FLOW_BAD_REQUEST', `${what} is invalid: ${problems.join('; ')}`, { status: 400, details: problems });
  }
}

export class InputInvalid extends FlowError {
  constructor(logic: string, problems: string[]) {
    super('FLOW_INPUT_INVALID', `input does not match the input schema of ${logic}: ${problems.join('; ')}`, {
      status: 422,
      details: problems,
    });
  }
}

export class ArtifactInvalid extends FlowError {
  constructor(file: string, why: string) {
    super('FLOW_ARTIFACT_INVALID', `${file}: ${why}`, { status: 422 });
  }
}
