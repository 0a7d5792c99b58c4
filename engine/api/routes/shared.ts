import { Problem } from '../../../contracts/api/problem.ts';

/** Every route's error answers, for the OpenAPI document: problem+json with a stable code. */
export const PROBLEMS = { '4xx': Problem, '5xx': Problem } as const;

/** Security requirement of a bearer-token route, for the OpenAPI document. */
export const BEARER = [{ bearer: [] }];
