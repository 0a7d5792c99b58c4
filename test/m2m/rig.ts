import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { engineOptionsFrom, loadConfig } from '../../engine/config.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { createLogger } from '../../engine/runtime/log.ts';
import type { Db } from '../../engine/store/db.ts';
import { settle, uniqueLogic } from '../support/engine.ts';
import { AuthServer, RESOURCE } from './support/auth-server.ts';
import { OwningService } from './support/owning-service.ts';
import { type Issued, TestCa } from './support/test-ca.ts';

const GRANT = { grant_types: ['client_credentials'], response_types: [], redirect_uris: [] };
export const CLIENT_SECRET = `secret-${randomBytes(8).toString('hex')}`;
export const SECRETS_KEY = randomBytes(32).toString('base64');

/**
 * Everything the identity tests run against, all on 127.0.0.1: a CA made here; the authorization
 * server knowing a client with a secret, one with a private key (private_key_jwt) and two that
 * authenticate with their certificates (engine-a, engine-b); an owning service over plain TLS and
 * one that demands client certificates and tokens bound to them; a rogue CA's certificate.
 */
export class Rig {
  readonly ca = new TestCa();
  readonly rogueCa = new TestCa('Rogue CA');
  readonly certA: Issued;
  readonly certB: Issued;
  readonly rogue: Issued;
  readonly jwtKeyFile: string;
  readonly auth: AuthServer;
  readonly service: OwningService;
  readonly mtlsService: OwningService;
  /** Every line any engine of the rig logged. */
  readonly logLines: string[] = [];
  /** The engines' token-cache clock, moved by the tests. */
  clock = Date.now();
  readonly #engines: Engine[] = [];

  constructor() {
    const server = this.ca.issue('services', 'server');
    this.certA = this.ca.issue('engine-a', 'client');
    this.certB = this.ca.issue('engine-b', 'client');
    this.rogue = this.rogueCa.issue('engine-a', 'client');
    const jwt = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    this.jwtKeyFile = join(this.ca.dir, 'jwt-client.pem');
    writeFileSync(this.jwtKeyFile, jwt.privateKey.export({ type: 'pkcs8', format: 'pem' }));
    const mtlsClient = (id: string, cn: string) => ({
      client_id: id,
      ...GRANT,
      token_endpoint_auth_method: 'tls_client_auth',
      tls_client_auth_subject_dn: `CN=${cn}`,
      tls_client_certificate_bound_access_tokens: true,
    });
    this.auth = new AuthServer({
      ca: this.ca,
      server,
      tokenTtl: 120,
      clients: [
        { client_id: 'secret-client', client_secret: CLIENT_SECRET, ...GRANT, token_endpoint_auth_method: 'client_secret_basic' },
        {
          client_id: 'jwt-client',
          ...GRANT,
          token_endpoint_auth_method: 'private_key_jwt',
          token_endpoint_auth_signing_alg: 'ES256',
          jwks: { keys: [jwt.publicKey.export({ format: 'jwk' })] },
        },
        mtlsClient('mtls-a', 'engine-a'),
        mtlsClient('mtls-b', 'engine-b'),
      ],
    });
    const issuer = () => this.auth.issuer;
    this.service = new OwningService({ ca: this.ca, server, issuer, mtls: false });
    this.mtlsService = new OwningService({ ca: this.ca, server, issuer, mtls: true });
  }

  async start(): Promise<this> {
    await Promise.all([this.auth.listen(), this.service.listen(), this.mtlsService.listen()]);
    return this;
  }

  /** The variables of a handler LEDGER at `service` with OAuth at the rig's server, plus `more`. */
  oauthEnv(service: OwningService, more: Record<string, string>): Record<string, string> {
    return {
      FLOW_HANDLER_LEDGER_URL: service.url,
      FLOW_HANDLER_LEDGER_OAUTH_ISSUER: this.auth.issuer,
      FLOW_HANDLER_LEDGER_OAUTH_RESOURCE: RESOURCE,
      FLOW_HANDLER_LEDGER_TLS_CA_FILE: this.ca.caFile,
      ...more,
    };
  }

  /** An engine configured from `variables` as `s8flow start` would be, logging into `logLines`. */
  engine(db: Db, variables: Record<string, string>): Engine {
    const lines = this.logLines;
    const destination = new Writable({
      write(chunk, _enc, done) {
        lines.push(String(chunk));
        done();
      },
    });
    const config = loadConfig(variables);
    const engine = new Engine(engineOptionsFrom(config, db, { logger: createLogger({ level: 'trace', destination }), identityClock: () => this.clock }));
    this.#engines.push(engine);
    return engine;
  }

  /** Runs one instance of a one-step workflow calling LEDGER /charge in `env`, to its end. */
  async run(engine: Engine, env: string, path = '/charge'): Promise<Awaited<ReturnType<Engine['get']>>> {
    const logic = uniqueLogic({ domain: 'ledger', start: 'charge', steps: { charge: { kind: 'proxy', path } } });
    await engine.publishVersion(env, logic);
    const { id } = await engine.start({ logicId: logic.logicId, input: { amount: 1 }, env });
    await engine.workers.drain();
    return engine.get(id, env);
  }

  async close(): Promise<void> {
    for (const e of this.#engines) await e.close();
    await Promise.all([this.auth.close(), this.service.close(), this.mtlsService.close()]);
    this.ca.cleanup();
    this.rogueCa.cleanup();
  }
}

export { settle };

/** Every row of every table of the engine's schema, as text: where a secret must never be found. */
export async function everyRow(db: Db): Promise<string> {
  const tables = await db.pool.query<{ table_name: string }>(
    `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`,
  );
  const out: string[] = [];
  for (const { table_name } of tables.rows) {
    const rows = await db.pool.query<{ row: string }>(`SELECT t::text AS row FROM ${escapeIdent(table_name)} t`);
    // bytea prints as \x<hex> (its backslash doubled inside a row): decoded, so a secret written as bytes is found too
    out.push(...rows.rows.map((r) => r.row.replace(/\\{1,2}x([0-9a-f]+)/g, (_, hex: string) => Buffer.from(hex, 'hex').toString('latin1'))));
  }
  return out.join('\n');
}

function escapeIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}
