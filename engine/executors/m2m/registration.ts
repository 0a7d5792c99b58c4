import { createCipheriv, createDecipheriv, createPublicKey, randomBytes } from 'node:crypto';
import * as oauth from 'oauth4webapi';
import { RegistrationFailed } from '../errors.ts';
import { asked, authorizationServer, type OAuthClient, requestOptions } from './client-credentials.ts';
import type { IdentitySettings } from './settings.ts';
import { certThumbprint, type ClientTls } from './tls.ts';

/**
 * Where registrations are kept, shared by every engine node (engine/store/m2m-registrations.ts).
 * `keep` returns the sealed registration of `identity` made for `fingerprint`; when there is none,
 * it runs `register` and keeps its result, once across all nodes (the others wait, then read it).
 */
export interface RegistrationStore {
  keep(identity: string, fingerprint: string, register: () => Promise<Buffer>): Promise<Buffer>;
}

/**
 * The client of an identity with OAUTH_REGISTER: registered (RFC 7591) with its certificate the
 * first time any node needs it, then read back. A new certificate, issuer or method is a new
 * fingerprint: the client is registered again. Client id and secret are sealed with `key`
 * (AES-256-GCM, the identity as associated data), so a row copied to another identity does not open.
 */
export async function registeredClient(
  name: string,
  s: IdentitySettings,
  tls: ClientTls,
  store: RegistrationStore,
  key: Buffer,
): Promise<OAuthClient> {
  const cert = tls.cert!;
  const fingerprint = `${s.register}|${s.issuer}|${certThumbprint(cert)}`;
  const sealed = await store.keep(name, fingerprint, async () => {
    const as = await authorizationServer(name, s, tls);
    if (as.registration_endpoint === undefined) throw new RegistrationFailed(name, `${s.issuer} advertises no registration_endpoint`);
    const metadata: Partial<oauth.OmitSymbolProperties<oauth.Client>> = {
      token_endpoint_auth_method: s.register,
      grant_types: ['client_credentials'],
      response_types: [],
      redirect_uris: [],
      tls_client_certificate_bound_access_tokens: true,
      ...(s.scope === undefined ? {} : { scope: s.scope }),
      ...(s.register === 'self_signed_tls_client_auth'
        ? { jwks: { keys: [{ ...createPublicKey(cert.publicKey.export({ type: 'spki', format: 'pem' })).export({ format: 'jwk' }), x5c: [cert.raw.toString('base64')] }] } }
        : { tls_client_auth_subject_dn: subjectDn(cert.subject) }),
    };
    const client = await asked(name, as.registration_endpoint, async () =>
      oauth.processDynamicClientRegistrationResponse(
        await oauth.dynamicClientRegistrationRequest(as, metadata, {
          ...requestOptions(tls),
          ...(s.initialAccessToken === undefined ? {} : { initialAccessToken: s.initialAccessToken }),
        }),
      ),
    ).catch((err: unknown) => {
      throw (err as { code?: string }).code === 'FLOW_M2M_CLIENT_REFUSED' ? new RegistrationFailed(name, (err as Error).message, err) : err;
    });
    const kept: OAuthClient = { clientId: client.client_id, ...(typeof client['client_secret'] === 'string' ? { clientSecret: client['client_secret'] } : {}) };
    return seal(key, name, JSON.stringify(kept));
  });
  try {
    return JSON.parse(unseal(key, name, sealed).toString('utf8')) as OAuthClient;
  } catch (err) {
    throw new RegistrationFailed(name, 'the kept registration does not open with FLOW_SECRETS_KEY (was the key changed?); restore the key, or delete its row in m2m_registrations to register again', err);
  }
}

/** Node prints a subject one RDN a line, most significant first; RFC 4514 lists them the other way, comma-separated. */
export function subjectDn(subject: string): string {
  return subject.split('\n').reverse().join(',');
}

export function seal(key: Buffer, identity: string, plain: string): Buffer {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv).setAAD(Buffer.from(identity));
  const body = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), body]);
}

export function unseal(key: Buffer, identity: string, sealed: Buffer): Buffer {
  const decipher = createDecipheriv('aes-256-gcm', key, sealed.subarray(0, 12)).setAAD(Buffer.from(identity));
  decipher.setAuthTag(sealed.subarray(12, 28));
  return Buffer.concat([decipher.update(sealed.subarray(28)), decipher.final()]);
}
