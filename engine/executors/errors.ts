import { FlowError } from '../../contracts/errors.ts';

export class UnknownHandler extends FlowError {
  constructor(name: string, envVar: string) {
    super('FLOW_UNKNOWN_HANDLER', `no handler profile "${name}": set ${envVar} (and optionally its _TOKEN) before the engine starts`, {
      status: 500,
    });
  }
}

export class HostNotAllowed extends FlowError {
  constructor(host: string, why = 'which is not on the engine\'s allowlist (httpAllowlist)') {
    super('FLOW_HTTP_HOST_NOT_ALLOWED', `http step called ${host}, ${why}`, {
      status: 403,
    });
  }
}

/**
 * A handler's machine identity could not be used for a call (engine/executors/m2m). `retryable`
 * says whether the attempt may be tried again: an authorization server that is down may be back,
 * a client it refused will be refused again.
 */
export class M2mError extends FlowError {
  readonly retryable: boolean;
  constructor(code: string, message: string, retryable: boolean, cause?: unknown) {
    super(code, message, { status: 502, ...(cause === undefined ? {} : { cause }) });
    this.retryable = retryable;
  }
}

/** The authorization server could not be reached, or answered 5xx/429: the attempt is retried. */
export class TokenUnavailable extends M2mError {
  constructor(identity: string, why: string, cause?: unknown) {
    super('FLOW_M2M_TOKEN_UNAVAILABLE', `no access token for ${identity}: ${why}; the attempt is retried`, true, cause);
  }
}

/** The authorization server refused the client (invalid_client, unauthorized_client, invalid_scope…). */
export class ClientRefused extends M2mError {
  constructor(identity: string, why: string, cause?: unknown) {
    super('FLOW_M2M_CLIENT_REFUSED', `the authorization server refused the client of ${identity}: ${why}; check its OAUTH_* variables`, false, cause);
  }
}

/** A TLS peer (the service or the authorization server) refused the client certificate. */
export class TlsRefused extends M2mError {
  constructor(identity: string, url: string, code: string) {
    super('FLOW_M2M_TLS_REFUSED', `${url} refused the client certificate of ${identity} (${code}); check its TLS_CERT_FILE against the CA the service trusts`, false);
  }
}

/** The service answered 401 to a token fetched for this very call. */
export class TokenRefused extends M2mError {
  constructor(identity: string, url: string) {
    super('FLOW_M2M_TOKEN_REFUSED', `${url} answered 401 to a fresh access token of ${identity}; check the audience, scope and certificate the service expects`, false);
  }
}

/** Registration (RFC 7591) was refused, or a kept registration cannot be read with FLOW_SECRETS_KEY. */
export class RegistrationFailed extends M2mError {
  constructor(identity: string, why: string, cause?: unknown) {
    super('FLOW_M2M_REGISTRATION_FAILED', `registering the client of ${identity} failed: ${why}`, false, cause);
  }
}
