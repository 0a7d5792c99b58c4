import { FlowError } from '../../contracts/errors.ts';

/**
 * The refusals of the HTTP edge. Each has a stable code (docs/errors.md) and the status of
 * ARCHITECTURE.md, Contracts: HTTP API; the engine's own FlowErrors keep theirs.
 */

export class Unauthenticated extends FlowError {
  constructor() {
    super('FLOW_UNAUTHENTICATED', 'send Authorization: Bearer <JWT>; this route needs a token', { status: 401 });
  }
}

export class TokenInvalid extends FlowError {
  constructor(why: string) {
    super('FLOW_TOKEN_INVALID', `the bearer token was refused: ${why}`, { status: 401 });
  }
}

export class TokenExpired extends FlowError {
  constructor() {
    super('FLOW_TOKEN_EXPIRED', 'the bearer token has expired; get a new one', { status: 401 });
  }
}

/** The token verified, but the keys to verify it could not be fetched: retry later. */
export class AuthKeysUnavailable extends FlowError {
  constructor(why: string) {
    super('FLOW_AUTH_KEYS_UNAVAILABLE', `the JWKS could not be read (${why}); retry shortly`, { status: 503 });
  }
}

export class AuthUnconfigured extends FlowError {
  constructor() {
    super(
      'FLOW_AUTH_UNCONFIGURED',
      'the API has no way to verify tokens: set FLOW_AUTH_JWKS_URL (a URL or a file path), or FLOW_AUTH_SECRET outside production',
    );
  }
}

export class EnvForbidden extends FlowError {
  constructor(subject: string, env: string) {
    super('FLOW_ENV_FORBIDDEN', `${subject}'s token does not grant env ${env} (its envs claim)`, { status: 403 });
  }
}

export class MalformedJson extends FlowError {
  constructor(why: string) {
    super('FLOW_MALFORMED_JSON', `the request body is not valid JSON: ${why}`, { status: 400 });
  }
}

export class BodyTooLarge extends FlowError {
  constructor(limit: number) {
    super('FLOW_BODY_TOO_LARGE', `the request body is over this route's limit of ${limit} bytes`, { status: 413 });
  }
}

export class UnsupportedMediaType extends FlowError {
  constructor(type: string | undefined) {
    super('FLOW_UNSUPPORTED_MEDIA_TYPE', `send the body as application/json, not ${type ?? 'no content type'}`, { status: 415 });
  }
}

/** Well-formed JSON (or query, params, headers) that breaks the route's schema. */
export class SchemaInvalid extends FlowError {
  constructor(where: string, problems: { path: string; message: string }[]) {
    super('FLOW_SCHEMA_INVALID', `the request ${where} breaks its schema: ${problems.map((p) => `${p.path || '(root)'}: ${p.message}`).join('; ')}`, {
      status: 422,
      details: problems,
    });
  }
}

export class RouteNotFound extends FlowError {
  constructor(method: string, url: string) {
    super('FLOW_ROUTE_NOT_FOUND', `no route ${method} ${url}; GET /openapi.json lists them`, { status: 404 });
  }
}

export class CursorInvalid extends FlowError {
  constructor() {
    super('FLOW_CURSOR_INVALID', 'cursor is not one this API gave out; pass nextCursor from the previous page unchanged', { status: 422 });
  }
}

export class NotReady extends FlowError {
  constructor(why: string) {
    super('FLOW_NOT_READY', `not ready: ${why}`, { status: 503 });
  }
}

export class Internal extends FlowError {
  constructor() {
    super('FLOW_INTERNAL', 'the engine failed to answer this request; the error is in its log', { status: 500 });
  }
}

/** A path the router cannot take apart: bad percent-encoding, or a segment over its length limit. */
export class MalformedUrl extends FlowError {
  constructor(why: string, status: 400 | 414) {
    super('FLOW_MALFORMED_URL', `the request path ${why}; percent-encode it as UTF-8 and keep each segment short`, { status });
  }
}
