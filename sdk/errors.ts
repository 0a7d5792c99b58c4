// Imported file by file (not through contracts/index.ts) so that an author's bundle stays free of
// jsonata and the rest of the contracts' runtime dependencies.
import { FlowError } from '../contracts/errors.ts';

/** Stable codes of the errors the SDK raises while a definition is built. */
export const SdkErrorCode = {
  duplicateStep: 'SDK_DUPLICATE_STEP',
  invalidName: 'SDK_INVALID_NAME',
  unknownStep: 'SDK_UNKNOWN_STEP',
  unknownModule: 'SDK_UNKNOWN_MODULE',
  noSteps: 'SDK_NO_STEPS',
  fallthroughIntoFail: 'SDK_FALLTHROUGH_INTO_FAIL',
  invalidOption: 'SDK_INVALID_OPTION',
  schemaUnrepresentable: 'SDK_SCHEMA_UNREPRESENTABLE',
} as const;
export type SdkErrorCode = (typeof SdkErrorCode)[keyof typeof SdkErrorCode];

/** A mistake in a workflow definition found while building it; `code` is one of `SdkErrorCode`. */
export class FlowSdkError extends FlowError {
  constructor(code: SdkErrorCode, message: string, details?: unknown) {
    super(code, message, { details });
    this.name = 'FlowSdkError';
  }
}
