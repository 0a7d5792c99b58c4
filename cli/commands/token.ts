import { SignJWT } from 'jose';
import { FlowError } from '../../contracts/errors.ts';
import { isProduction, loadConfig } from '../../engine/config.ts';
import { flag, parseArgs, UsageError } from '../args.ts';

/**
 * Mints a development API token: an HS256 JWT signed with FLOW_AUTH_SECRET carrying the claims
 * the API reads (`sub`, `envs`, `scope`, `exp`). Production verifies tokens against a JWKS and
 * trusts no shared secret, so the command refuses to run there.
 */
export async function tokenCommand(argv: string[]): Promise<number> {
  if (isProduction()) {
    throw new FlowError('CLI_TOKEN_IN_PRODUCTION', 'NODE_ENV is production: mint tokens with your identity provider, not with s8flow token');
  }
  const args = parseArgs(argv);
  const sub = flag(args, 'sub');
  const envs = args.flags.get('env') ?? [];
  const scope = (flag(args, 'scope') ?? '').trim().split(/\s+/).filter((s) => s !== '');
  if (sub === undefined || sub === '' || envs.length === 0 || scope.length === 0) throw new UsageError('s8flow token needs --sub, at least one --env and a non-empty --scope');
  const ttl = flag(args, 'ttl') ?? '1h';
  if (!/^\d+\s*(s|sec|secs|m|min|mins|h|hr|hrs|d|day|days|w|week|weeks)$/.test(ttl)) {
    throw new UsageError(`--ttl takes a duration such as 30m, 1h or 7d, not ${ttl}`);
  }
  const secret = loadConfig().auth.secret;
  if (secret === undefined) {
    throw new FlowError('CLI_NO_AUTH_SECRET', 'set FLOW_AUTH_SECRET (32+ characters) to the HS256 secret the development API verifies tokens with');
  }
  const token = await new SignJWT({ envs, scope: scope.join(' ') })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(sub)
    .setIssuedAt()
    .setExpirationTime(ttl)
    .sign(new TextEncoder().encode(secret));
  process.stdout.write(`${token}\n`);
  return 0;
}
