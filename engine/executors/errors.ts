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
