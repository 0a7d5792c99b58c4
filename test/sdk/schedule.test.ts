import { describe, expect, test } from 'vitest';
import { z } from 'zod';
import { FlowSdkError, workflow } from '../../sdk/index.ts';

const base = workflow({ logicId: 'sdk.sched', version: 1, domain: 'sdk', input: z.object({ n: z.number() }) }).pass('go', {});

function refusal(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(FlowSdkError);
    expect((err as FlowSdkError).code).toBe('SDK_INVALID_OPTION');
    return (err as Error).message;
  }
  throw new Error('not refused');
}

describe('.schedule()', () => {
  test('declares a schedule in the definition, options as written', () => {
    const d = base.schedule('0 6 1 * *', { name: 'monthly', timezone: 'Europe/Berlin', overlap: 'buffer_one', catchUp: 'P1D', input: { n: 1 } }).definition();
    expect(d.schedules).toEqual([{ name: 'monthly', cron: '0 6 1 * *', timezone: 'Europe/Berlin', overlap: 'buffer_one', catchUp: 'P1D', input: { n: 1 } }]);
    expect(base.definition().schedules).toEqual([]);
  });

  test('refuses, where it is written, what croner cannot read and options that cannot work', () => {
    expect(refusal(() => base.schedule('0 25 * * *'))).toMatch(/sdk\.sched@1 schedule "0 25 \* \* \*": not a cron pattern/);
    expect(refusal(() => base.schedule('0 6 * * *', { timezone: 'Europe/Atlantis', input: { n: 1 } }))).toMatch(/timezone "Europe\/Atlantis" is not an IANA time zone/);
    expect(refusal(() => base.schedule('0 6 * * *', { catchUp: '5 minutes', input: { n: 1 } }))).toMatch(/catchUp "5 minutes" is not an ISO 8601 duration/);
    expect(refusal(() => base.schedule('0 6 * * *', { overlap: 'queue' as never, input: { n: 1 } }))).toMatch(/overlap must be one of skip, buffer_one, allow/);
    expect(refusal(() => base.schedule('0 6 * * *', { input: { n: 'one' } as never }))).toMatch(/input does not match the workflow's input schema/);
    expect(refusal(() => base.schedule('0 6 * * *', { input: { n: 1 } }).schedule('0 7 * * *', { name: '1', input: { n: 1 } }))).toMatch(/same name/);
  });
});
