import { describe, expect, it } from 'vitest';
import { MAX_DEPTH, storableProblem } from '../../engine/core/storable.ts';
import { storableResult } from '../../engine/runtime/storable.ts';

const limits = { maxBytes: 1024, maxRetryAfterMs: 3_600_000 };

describe('storableProblem', () => {
  it('passes what jsonb holds, however it is spelled', () => {
    for (const v of [null, true, 0, -1.5e300, '', 'ünïcödé 😀 \u2028', [], {}, { a: [1, { b: 'c' }] }, 'x'.repeat(1000)]) {
      expect(storableProblem(v, 1024), JSON.stringify(v)).toBeNull();
    }
  });

  it('names the path of a NUL, a lone surrogate (in a value or a key) or a number JSON cannot hold', () => {
    expect(storableProblem({ a: [0, 'x\u0000'] }, 1024)).toMatchObject({ kind: 'unstorable', path: '$.a[1]' });
    expect(storableProblem({ a: { '\ud800': 1 } }, 1024)).toMatchObject({ kind: 'unstorable', path: '$.a (a key)' });
    expect(storableProblem(['\udfff'], 1024)).toMatchObject({ kind: 'unstorable', path: '$[0]' });
    expect(storableProblem({ n: Number.POSITIVE_INFINITY }, 1024)).toMatchObject({ kind: 'unstorable', path: '$.n' });
  });

  it('measures size exactly near the cap: multi-byte text counts in UTF-8 bytes', () => {
    expect(storableProblem('x'.repeat(1022), 1024)).toBeNull();
    expect(storableProblem('x'.repeat(1023), 1024)).toEqual({ kind: 'too_large', bytes: 1025, max: 1024 });
    expect(storableProblem('é'.repeat(600), 1024)).toEqual({ kind: 'too_large', bytes: 1202, max: 1024 });
  });

  it('refuses nesting deeper than MAX_DEPTH without recursing: 200,000 deep costs no stack', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 200_000; i++) deep = [deep];
    expect(storableProblem(deep, 10 * 1024 * 1024)).toMatchObject({ kind: 'unstorable', why: `nests deeper than ${MAX_DEPTH} levels` });
    let ok: unknown = 1;
    for (let i = 0; i < MAX_DEPTH; i++) ok = [ok];
    expect(storableProblem(ok, 10 * 1024)).toBeNull();
  });
});

describe('storableResult', () => {
  it('turns an output or a host call that cannot be stored into a permanent failure', () => {
    expect(storableResult({ status: 'succeeded', output: { s: '\u0000' } }, limits)).toMatchObject({
      status: 'failed',
      retryable: false,
      error: { code: 'FLOW_RESULT_UNSTORABLE' },
    });
    expect(storableResult({ status: 'succeeded', output: 'x'.repeat(2000) }, limits)).toMatchObject({ status: 'failed', error: { code: 'FLOW_RESULT_TOO_LARGE' } });
    const record = { clock: { nowMs: 0, seed: 1 }, calls: [{ n: 0, importName: 'lookup', request: {}, response: { s: '\ud800' } }] };
    expect(storableResult({ status: 'progress', record }, limits)).toMatchObject({ status: 'failed', retryable: false, error: { code: 'FLOW_RESULT_UNSTORABLE' } });
  });

  it('cuts a Retry-After wait to the maximum and drops one that is not a number', () => {
    const failed = (retryAfterMs: number) => ({ status: 'failed' as const, retryable: true, retryAfterMs, error: { code: 'HTTP_503', message: 'busy' } });
    expect(storableResult(failed(1e17), limits)).toMatchObject({ retryAfterMs: 3_600_000 });
    expect(storableResult(failed(Number.POSITIVE_INFINITY), limits)).toMatchObject({ retryAfterMs: 3_600_000 });
    expect(storableResult(failed(-5), limits)).toMatchObject({ retryAfterMs: 0 });
    expect(storableResult(failed(Number.NaN), limits)).not.toHaveProperty('retryAfterMs');
    const fine = failed(2000);
    expect(storableResult(fine, limits)).toBe(fine);
  });

  it('keeps an error storable: NUL and lone surrogates replaced, the message bounded', () => {
    const r = storableResult({ status: 'failed', retryable: false, error: { code: 'HTTP_400', message: `a\u0000b\ud800${'m'.repeat(5000)}`, status: 400 } }, limits);
    expect(r).toMatchObject({ status: 'failed', error: { code: 'HTTP_400', status: 400 } });
    const message = (r as { error: { message: string } }).error.message;
    expect(message.startsWith('a\ufffdb\ufffd')).toBe(true);
    expect(message.length).toBe(2000);
  });
});
