import { createHmac, timingSafeEqual } from 'node:crypto';
import { FlowError } from '../../contracts/errors.ts';

/**
 * Resume tokens name one parked attempt (`<workflowId>.<seq>`) and carry an HMAC, so a caller can
 * neither forge one nor point it at another tenant's instance: the env is read from the record
 * the token names, never taken from the caller.
 */
export class ResumeTokens {
  readonly #secret: string;
  constructor(secret: string) {
    this.#secret = secret;
  }

  sign(workflowId: string, seq: number): string {
    const body = `${workflowId}.${seq}`;
    return `${body}.${this.#mac(body)}`;
  }

  verify(token: string): { workflowId: string; seq: number } {
    const m = /^([0-9a-f-]{36})\.(\d+)\.([A-Za-z0-9_-]+)$/.exec(token);
    const expected = m ? Buffer.from(this.#mac(`${m[1]}.${m[2]}`)) : null;
    if (m === null || expected === null || expected.length !== m[3]!.length || !timingSafeEqual(expected, Buffer.from(m[3]!))) {
      throw new FlowError('FLOW_BAD_TOKEN', 'the resume token is malformed or was not issued by this engine', { status: 401 });
    }
    return { workflowId: m[1]!, seq: Number(m[2]) };
  }

  #mac(body: string): string {
    return createHmac('sha256', this.#secret).update(body).digest('base64url').slice(0, 32);
  }
}
