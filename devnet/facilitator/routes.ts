// POST /verify and POST /settle of a facilitator, the same in both x402 versions: a body that is not
// a facilitator request is a 400; otherwise the facilitator's answer (a throw answered as an invalid
// payment), recorded, then sent with 200.
import type { Express } from 'express';

export interface FacilitatorRoutes<Payment, Requirements, Verified, Settled> {
  /** The payment and requirements of a request body, or undefined when it is not a facilitator request. */
  readBody(body: unknown): { payment: Payment; requirements: Requirements } | undefined;
  verify(payment: Payment, requirements: Requirements): Promise<Verified>;
  /** The answer of /verify when `verify` threw. */
  verifyFailed(error: unknown): Verified;
  settle(payment: Payment, requirements: Requirements): Promise<Settled>;
  /** The answer of /settle when `settle` threw. */
  settleFailed(error: unknown, requirements: Requirements): Settled;
  record(path: '/verify' | '/settle', payment: Payment, requirements: Requirements, answer: Verified | Settled): void;
}

export function serveVerifyAndSettle<Payment, Requirements, Verified, Settled>(
  app: Express,
  routes: FacilitatorRoutes<Payment, Requirements, Verified, Settled>,
): void {
  function serve<Answer extends Verified | Settled>(
    path: '/verify' | '/settle',
    invalidBody: object,
    answer: (payment: Payment, requirements: Requirements) => Promise<Answer>,
    failed: (error: unknown, requirements: Requirements) => Answer,
  ): void {
    app.post(path, async (request, response) => {
      const body = routes.readBody(request.body);
      if (!body) {
        response.status(400).json(invalidBody);
        return;
      }
      const { payment, requirements } = body;
      let answered: Answer;
      try {
        answered = await answer(payment, requirements);
      } catch (error) {
        answered = failed(error, requirements);
      }
      routes.record(path, payment, requirements, answered);
      response.json(answered);
    });
  }
  serve(
    '/verify',
    { isValid: false, invalidReason: 'invalid_payload' },
    (payment, requirements) => routes.verify(payment, requirements),
    (error) => routes.verifyFailed(error),
  );
  serve(
    '/settle',
    { success: false, errorReason: 'invalid_payload', transaction: '', network: '' },
    (payment, requirements) => routes.settle(payment, requirements),
    (error, requirements) => routes.settleFailed(error, requirements),
  );
}
