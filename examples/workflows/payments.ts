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
