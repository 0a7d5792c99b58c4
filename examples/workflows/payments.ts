import { workflow } from 'sentin8-flow/sdk';
import { z } from 'zod';

/** What a caller (or the payments service) starts a capture with. */
export const CaptureInput = z.object({
  paymentId: z.string().min(1),
  accountId: z.string().min(1),
  /** Major units, e.g. 12.5 EUR. */
  amount: z.number().positive(),
  currency: z.string().length(3),
  customerEmail: z.email().optional(),
});

/**
 * Reserve funds, score the risk in a WASM module (which asks the service for the account's
 * history), ask an approver when the score or the amount is high, capture, then notify.
 * A failure after the reservation releases it (and refunds a capture); a failed notification does
 * not undo the payment.
 */
export const paymentsCapture = workflow({
  logicId: 'payments.capture',
  version: 2,
  domain: 'payments',
  description: 'Reserve, approve large amounts, capture and notify.',
  input: CaptureInput,
})
  .module('risk', {
    assemblyScript: './modules/risk-score.as.ts',
    imports: { accountHistory: { path: '/accounts/history' } },
  })
  .proxy('reserve', {
    path: '/funds/reserve',
    input: ({ input }) => ({
      paymentId: input.paymentId,
      accountId: input.accountId,
      cents: Math.round(input.amount * 100),
      currency: input.currency,
    }),
    output: z.object({ reservationId: z.string() }),
    retry: { maxAttempts: 5, initialMs: 500 },
    timeoutMs: 10_000,
    compensate: {
      kind: 'proxy',
      path: '/funds/release',
      input: ({ input, steps }) => ({ paymentId: input.paymentId, reservationId: steps.reserve?.reservationId }),
    },
  })
  .func('score', {
    module: 'risk',
    input: ({ input }) => ({ accountId: input.accountId, cents: Math.round(input.amount * 100) }),
    output: z.object({ score: z.number(), needsApproval: z.boolean(), reason: z.string() }),
    timeoutMs: 5_000,
  })
  .choice('needsApproval', {
    branches: [{ when: ({ input, steps }) => steps.score.needsApproval || input.amount >= 10_000, next: 'approval' }],
    otherwise: 'capture',
  })
  .decision('approval', {
    options: ['approve', 'reject'],
    schema: z.object({ note: z.string().max(500).optional() }),
    approverScope: 'payments:approve',
    deadline: 'P2D',
    input: ({ input }) => ({ paymentId: input.paymentId, amount: input.amount, currency: input.currency }),
  })
  .choice('approved', {
    branches: [{ when: ({ decision }) => decision.option === 'approve', next: 'capture' }],
    otherwise: 'rejected',
  })
  .fail('rejected', { code: 'PAYMENT_REJECTED', message: 'An approver rejected the payment' })
  .proxy('capture', {
    path: '/funds/capture',
    input: ({ input, steps }) => ({ paymentId: input.paymentId, reservationId: steps.reserve.reservationId }),
    output: z.object({ captureId: z.string(), capturedCents: z.number().int() }),
    compensate: {
      kind: 'proxy',
      path: '/funds/refund',
      input: ({ input, steps }) => ({ paymentId: input.paymentId, captureId: steps.capture?.captureId }),
    },
  })
  .proxy('notify', {
    path: '/notify',
    input: ({ input, steps }) => ({
      paymentId: input.paymentId,
      to: input.customerEmail,
      text: `Captured ${steps.capture.capturedCents / 100} ${input.currency} for payment ${input.paymentId}`,
    }),
    retry: { maxAttempts: 8 },
    onError: 'notifyFailed',
    next: null,
  })
  .pass('notifyFailed', { input: ({ input }) => ({ paymentId: input.paymentId, notified: false }) })
  .output(({ input, steps }) => ({
    paymentId: input.paymentId,
    captureId: steps.capture.captureId,
    approved: steps.approval !== undefined,
  }));

/** What a capture of version 3 starts with: version 2's input, and how the account's funds settle. */
export const CaptureInputV3 = CaptureInput.extend({
  /**
   * `ledger`: the funds settle through the ledger, later; the payment waits for the ledger's
   * `ledger.funds_settled` event before it captures. (Default: `immediate`)
   */
  settlement: z.enum(['immediate', 'ledger']).optional(),
});

/**
 * Version 3 (version 2 stays published: its instances keep running on it): before capturing,
 * a fraud check at the payments service, which may refer the payment (it then fails and
 * compensates); and a payment whose funds settle through the ledger waits for `funds.settled`,
 * delivered by the ledger's `ledger.funds_settled` event to the payment it names (the
 * `paymentId` search attribute) through a message trigger. Its capture and output carry the
 * fraud check's id.
 */
export const paymentsCaptureV3 = workflow({
  logicId: 'payments.capture',
  version: 3,
  domain: 'payments',
  description: 'Reserve, approve large amounts, check for fraud, wait for the ledger when it settles, capture and notify.',
  input: CaptureInputV3,
  attributes: { paymentId: { type: 'string', value: ({ input }) => input.paymentId } },
})
  .module('risk', {
    assemblyScript: './modules/risk-score.as.ts',
    imports: { accountHistory: { path: '/accounts/history' } },
  })
  .proxy('reserve', {
    path: '/funds/reserve',
    input: ({ input }) => ({
      paymentId: input.paymentId,
      accountId: input.accountId,
      cents: Math.round(input.amount * 100),
      currency: input.currency,
    }),
    output: z.object({ reservationId: z.string() }),
    retry: { maxAttempts: 5, initialMs: 500 },
    timeoutMs: 10_000,
    compensate: {
      kind: 'proxy',
      path: '/funds/release',
      input: ({ input, steps }) => ({ paymentId: input.paymentId, reservationId: steps.reserve?.reservationId }),
    },
  })
  .func('score', {
    module: 'risk',
    input: ({ input }) => ({ accountId: input.accountId, cents: Math.round(input.amount * 100) }),
    output: z.object({ score: z.number(), needsApproval: z.boolean(), reason: z.string() }),
    timeoutMs: 5_000,
  })
  .choice('needsApproval', {
    branches: [{ when: ({ input, steps }) => steps.score.needsApproval || input.amount >= 10_000, next: 'approval' }],
    otherwise: 'fraudCheck',
  })
  .decision('approval', {
    options: ['approve', 'reject'],
    schema: z.object({ note: z.string().max(500).optional() }),
    approverScope: 'payments:approve',
    deadline: 'P2D',
    input: ({ input }) => ({ paymentId: input.paymentId, amount: input.amount, currency: input.currency }),
  })
  .choice('approved', {
    branches: [{ when: ({ decision }) => decision.option === 'approve', next: 'fraudCheck' }],
    otherwise: 'rejected',
  })
  .fail('rejected', { code: 'PAYMENT_REJECTED', message: 'An approver rejected the payment' })
  .proxy('fraudCheck', {
    path: '/fraud/check',
    input: ({ input }) => ({ paymentId: input.paymentId, accountId: input.accountId, cents: Math.round(input.amount * 100) }),
    output: z.object({ checkId: z.string(), verdict: z.enum(['clear', 'refer']) }),
    retry: { maxAttempts: 5, initialMs: 500 },
  })
  .choice('cleared', {
    branches: [{ when: ({ steps }) => steps.fraudCheck.verdict === 'clear', next: 'settlement' }],
    otherwise: 'referred',
  })
  .fail('referred', { code: 'PAYMENT_REFERRED', message: 'The fraud check referred the payment' })
  .choice('settlement', {
    branches: [{ when: ({ input }) => input.settlement === 'ledger', next: 'settled' }],
    otherwise: 'capture',
  })
  .waitFor('settled', {
    message: 'funds.settled',
    schema: z.object({ ledgerRef: z.string(), amount: z.number() }),
    timeout: 'P7D',
  })
  .trigger('ledger.funds_settled', {
    payload: z.object({ paymentId: z.string(), ledgerRef: z.string(), amount: z.number() }),
    message: 'funds.settled',
    match: { attribute: 'paymentId', value: ({ event }) => event.payload.paymentId },
    messagePayload: ({ event }) => ({ ledgerRef: event.payload.ledgerRef, amount: event.payload.amount }),
  })
  .proxy('capture', {
    path: '/funds/capture',
    input: ({ input, steps }) => ({ paymentId: input.paymentId, reservationId: steps.reserve.reservationId, fraudCheckId: steps.fraudCheck.checkId }),
    output: z.object({ captureId: z.string(), capturedCents: z.number().int() }),
    compensate: {
      kind: 'proxy',
      path: '/funds/refund',
      input: ({ input, steps }) => ({ paymentId: input.paymentId, captureId: steps.capture?.captureId }),
    },
  })
  .proxy('notify', {
    path: '/notify',
    input: ({ input, steps }) => ({
      paymentId: input.paymentId,
      to: input.customerEmail,
      text: `Captured ${steps.capture.capturedCents / 100} ${input.currency} for payment ${input.paymentId}`,
    }),
    retry: { maxAttempts: 8 },
    onError: 'notifyFailed',
    next: null,
  })
  .pass('notifyFailed', { input: ({ input }) => ({ paymentId: input.paymentId, notified: false }) })
  .output(({ input, steps }) => ({
    paymentId: input.paymentId,
    captureId: steps.capture.captureId,
    approved: steps.approval !== undefined,
    fraudCheckId: steps.fraudCheck.checkId,
  }));
