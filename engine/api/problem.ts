import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { FlowError } from '../../contracts/errors.ts';
import { PROBLEM_CONTENT_TYPE, type Problem, problemType } from '../../contracts/api/problem.ts';
import { InputUnstorable } from '../runtime/storable.ts';
import { BodyTooLarge, Internal, MalformedJson, MalformedUrl, RouteNotFound, SchemaInvalid, UnsupportedMediaType } from './errors.ts';
import { redactUrl } from './redact.ts';

const TITLES: Record<number, string> = {
  400: 'Malformed request',
  401: 'Not authenticated',
  403: 'Not allowed',
  404: 'Not found',
  409: 'Conflict',
  413: 'Body too large',
  414: 'Path too long',
  415: 'Unsupported media type',
  422: 'Request breaks its schema',
  500: 'Internal error',
  503: 'Unavailable',
};

/**
 * One error handler for the whole API: every error becomes `application/problem+json` with a
 * stable code. Fastify's own refusals (unparseable JSON, a body over the limit, schema
 * validation) are translated first, so bad input is always a 4xx and never reaches a 500.
 */
export function installProblemHandlers(app: FastifyInstance, bodyLimitOf: (req: FastifyRequest) => number): void {
  app.setErrorHandler((err: FastifyError, req, reply) => {
    const flow = toFlowError(err, req, bodyLimitOf);
    if (flow.status >= 500) req.log.error({ err }, 'request failed');
    return sendProblem(reply, req, flow);
  });
  app.setNotFoundHandler((req, reply) => sendProblem(reply, req, new RouteNotFound(req.method, redactUrl(req.url.split('?')[0]!))));
}

/**
 * Fastify's `frameworkErrors`: the router's refusals (a path that does not decode, a parameter over
 * `maxParamLength`) come before any route or error handler, so they are translated here.
 */
export function frameworkErrors(err: FastifyError, req: FastifyRequest, reply: FastifyReply): void {
  const flow =
    err.code === 'FST_ERR_MAX_PARAM_LENGTH'
      ? new MalformedUrl('has a segment over the length limit', 414)
      : err.code === 'FST_ERR_BAD_URL'
        ? new MalformedUrl('does not decode', 400)
        : new MalformedJson(err.message);
  void sendProblem(reply, req, flow);
}

export function sendProblem(reply: FastifyReply, req: FastifyRequest, err: FlowError): FastifyReply {
  const body: Problem = {
    type: problemType(err.code),
    title: TITLES[err.status] ?? 'Error',
    status: err.status,
    code: err.code,
    detail: err.message,
    instance: redactUrl(req.url.split('?')[0]!),
  };
  const errors = problemList(err.details);
  if (errors !== undefined) body.errors = errors;
  if (err.status === 401) reply.header('www-authenticate', 'Bearer');
  return reply.code(err.status).type(PROBLEM_CONTENT_TYPE).send(body);
}

function toFlowError(err: FastifyError, req: FastifyRequest, bodyLimitOf: (req: FastifyRequest) => number): FlowError {
  if (err instanceof FlowError) return err.status >= 400 && err.status <= 599 ? err : new Internal();
  if (hasZodFastifySchemaValidationErrors(err)) {
    const where = err.validationContext ?? 'body';
    return new SchemaInvalid(
      where,
      err.validation.map((v) => ({ path: `${where}${v.instancePath.replace(/\/$/, '').replaceAll('/', '.')}`, message: v.message ?? 'invalid' })),
    );
  }
  switch (err.code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new MalformedJson(err.message);
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new BodyTooLarge(bodyLimitOf(req));
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new UnsupportedMediaType(req.headers['content-type']);
  }
  // the last line: a value Postgres refused as data (SQLSTATE class 22 data exception, 54 program
  // limit) is the request's, whatever schema let it through
  const sqlstate = dataExceptionOf(err);
  if (sqlstate !== null) return new InputUnstorable('the request', '(a value)', `was refused by Postgres as data (SQLSTATE ${sqlstate})`);
  // Fastify's other request refusals (bad content length, aborted body…) are the caller's; the rest are ours.
  if (err instanceof SyntaxError) return new MalformedJson(err.message);
  if (typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500) return new MalformedJson(err.message);
  return new Internal();
}

/** The SQLSTATE of a data exception (class 22) or program limit (class 54) in `err` or its causes, else null. */
function dataExceptionOf(err: unknown): string | null {
  for (let e = err, depth = 0; e !== null && typeof e === 'object' && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && /^(22|54)[0-9A-Z]{3}$/.test(code)) return code;
  }
  return null;
}

function problemList(details: unknown): Problem['errors'] {
  if (!Array.isArray(details) || details.length === 0) return undefined;
  return details.map((d) =>
    typeof d === 'string'
      ? { path: '', message: d }
      : { path: String((d as { path?: unknown }).path ?? ''), message: String((d as { message?: unknown }).message ?? JSON.stringify(d)) },
  );
}
