import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A key and certificate on disk (the engine reads files) and in memory (the servers take buffers). */
export interface Issued {
  keyFile: string;
  certFile: string;
  key: Buffer;
  cert: Buffer;
}

/**
 * A certificate authority made for one test run with the openssl CLI, in a temporary directory:
 * `issue` signs a server certificate for 127.0.0.1 or a client certificate for a common name.
 */
export class TestCa {
  readonly dir = mkdtempSync(join(tmpdir(), 's8flow-ca-'));
  readonly ca: Issued;

  constructor(readonly name = 'Flow Test CA') {
    this.ca = this.#pair('ca', ['-x509', '-days', '2', '-subj', `/CN=${name}`, '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign']);
  }

  get caFile(): string {
    return this.ca.certFile;
  }

  /** A certificate signed by this CA: `server` for 127.0.0.1 (serverAuth), else a client one (clientAuth). */
  issue(cn: string, kind: 'server' | 'client'): Issued {
    const base = join(this.dir, cn);
    const csr = this.#pair(cn, ['-subj', `/CN=${cn}`]);
    const ext = `${base}.ext`;
    writeFileSync(ext, kind === 'server' ? 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' : 'extendedKeyUsage=clientAuth\n');
    openssl(['x509', '-req', '-in', `${base}.csr`, '-CA', this.ca.certFile, '-CAkey', this.ca.keyFile, '-CAcreateserial', '-days', '1', '-extfile', ext, '-out', csr.certFile]);
    return { ...csr, cert: readFileSync(csr.certFile) };
  }

  /** A fresh EC key and either a self-signed certificate (`-x509`) or a signing request. */
  #pair(cn: string, args: string[]): Issued {
    const keyFile = join(this.dir, `${cn}.key`);
    const certFile = join(this.dir, `${cn}.crt`);
    const x509 = args.includes('-x509');
    openssl(['req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', keyFile, '-out', x509 ? certFile : join(this.dir, `${cn}.csr`), ...args]);
    return { keyFile, certFile, key: readFileSync(keyFile), cert: x509 ? readFileSync(certFile) : Buffer.alloc(0) };
  }

  cleanup(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function openssl(args: string[]): void {
  execFileSync('/usr/bin/openssl', args, { stdio: 'pipe' });
}
