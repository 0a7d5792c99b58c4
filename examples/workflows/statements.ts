import { workflow } from 'sentin8-flow/sdk';
import { z } from 'zod';

/** Sets up monthly statements for an account as soon as it is opened. */
export const statementsMonthly = workflow({
  logicId: 'statements.monthly',
  version: 2,
  domain: 'statements',
  description: 'Enrol a new account in monthly statements and send the welcome statement.',
  // the engine checks a trigger's mapped input against this schema: what an event must get right
  // (the channel) is carried into the input, so `channel: "fax"` is refused at the door
  input: z.object({ accountId: z.string().min(1), currency: z.string().length(3), channel: z.enum(['web', 'branch']) }),
})
  .trigger('account.opened', {
    payload: z.object({ accountId: z.string(), currency: z.string(), channel: z.enum(['web', 'branch']) }),
    input: ({ event }) => ({
      accountId: event.payload.accountId,
      currency: event.payload.currency,
      channel: event.payload.channel,
    }),
  })
  // the bank's own house account gets its statement run at 06:00 Berlin time on the 1st of each
  // month; a run missed by an outage still goes out within the day
  .schedule('0 6 1 * *', {
    name: 'house-account',
    timezone: 'Europe/Berlin',
    overlap: 'skip',
    catchUp: 'P1D',
    input: { accountId: 'acct-house', currency: 'EUR', channel: 'web' },
  })
  .proxy('enrol', {
    path: '/statements/enrol',
    input: ({ input }) => ({ accountId: input.accountId, cadence: 'monthly', delivery: input.channel === 'web' ? 'email' : 'post' }),
    output: z.object({ scheduleId: z.string(), firstStatementOn: z.string() }),
    compensate: { kind: 'proxy', path: '/statements/unenrol', input: ({ input }) => ({ accountId: input.accountId }) },
  })
  .proxy('generate', {
    path: '/statements/generate',
    input: ({ input, steps }) => ({ accountId: input.accountId, scheduleId: steps.enrol.scheduleId, kind: 'welcome' }),
    output: z.object({ statementId: z.string(), pages: z.int() }),
  })
  .emit('published', {
    event: 'statement.generated',
    payload: ({ input, steps }) => ({
      accountId: input.accountId,
      statementId: steps.generate.statementId,
      label: `${input.currency} statement (${steps.generate.pages} pages)`,
    }),
  })
  .output(({ steps }) => ({ scheduleId: steps.enrol.scheduleId, statementId: steps.generate.statementId }));
