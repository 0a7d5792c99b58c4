import { workflow } from 'sentin8-flow/sdk';
import { z } from 'zod';

/** Sets up monthly statements for an account as soon as it is opened. */
export const statementsMonthly = workflow({
  logicId: 'statements.monthly',
  version: 1,
  domain: 'statements',
  description: 'Enrol a new account in monthly statements and send the welcome statement.',
  input: z.object({ accountId: z.string().min(1), currency: z.string().length(3), paperless: z.boolean() }),
})
  .trigger('account.opened', {
    payload: z.object({ accountId: z.string(), currency: z.string(), channel: z.enum(['web', 'branch']) }),
    input: ({ event }) => ({
      accountId: event.payload.accountId,
      currency: event.payload.currency,
      paperless: event.payload.channel === 'web',
    }),
  })
  .proxy('enrol', {
    path: '/statements/enrol',
    input: ({ input }) => ({ accountId: input.accountId, cadence: 'monthly', delivery: input.paperless ? 'email' : 'post' }),
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
