/**
 * The x402 facilitator's POST /settle (FACILITATOR_URL), read strictly. Its answer sorts into what
 * we may conclude: settled (with a transaction), broadcast but unconfirmed (a transaction, no
 * success), refused (no transaction: nothing was sent), or unknown (timeout, 5xx, unreadable), where
 * the payment may or may not have moved and only the chain can tell.
 */
import { isPlainObject } from '../x402/parse';
import { X402_VERSION, type PaymentPayload, type PaymentRequirements } from '../x402/types';

/** A /settle answer is a few hundred bytes; more is not a facilitator speaking. */
export const MAX_FACILITATOR_RESPONSE_BYTES = 64 * 1024;

export type FacilitatorSettlement =
  | { kind: 'settled'; transaction: string; payer?: string }
  | { kind: 'unconfirmed'; transaction: string; errorReason: string }
  | { kind: 'refused'; errorReason: string }
  | { kind: 'unknown'; details: string };

async function readBounded(response: Response, maxBytes: number): Promise<string | undefined> {
  if (!response.body) return '';
  // A fetch body is a stream of bytes (Fetch standard), which undici types as ReadableStream<any>.
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel();
      return undefined;
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

export async function settleWithFacilitator(
  facilitatorUrl: string,
  payment: PaymentPayload,
  requirements: PaymentRequirements,
  options: { timeoutMs: number; fetch?: typeof fetch },
): Promise<FacilitatorSettlement> {
  const send = options.fetch ?? fetch;
  const signal = AbortSignal.timeout(options.timeoutMs);
  let response: Response;
  let text: string | undefined;
  try {
    response = await send(`${facilitatorUrl.replace(/\/+$/, '')}/settle`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify({ x402Version: X402_VERSION, paymentPayload: payment, paymentRequirements: requirements }),
      signal,
      redirect: 'error',
    });
    text = await readBounded(response, MAX_FACILITATOR_RESPONSE_BYTES);
  } catch (error) {
    return {
      kind: 'unknown',
      details: `facilitator /settle: ${error instanceof Error ? error.message : String(error)}`,
    };
  }
  if (text === undefined) return { kind: 'unknown', details: 'facilitator /settle answered more than we read' };
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  const answer = isPlainObject(body) ? body : undefined;
  const transaction = typeof answer?.transaction === 'string' ? answer.transaction : '';
  const errorReason = typeof answer?.errorReason === 'string' ? answer.errorReason : undefined;

  if (response.status >= 500) return { kind: 'unknown', details: `facilitator /settle answered ${response.status}` };
  if (response.status >= 400)
    return { kind: 'refused', errorReason: errorReason ?? `facilitator_http_${response.status}` };
  if (!answer || typeof answer.success !== 'boolean')
    return { kind: 'unknown', details: 'facilitator /settle answer is not a settlement response' };
  if (answer.success) {
    if (transaction === '') return { kind: 'unknown', details: 'facilitator reports success without a transaction' };
    return { kind: 'settled', transaction, payer: typeof answer.payer === 'string' ? answer.payer : undefined };
  }
  if (transaction !== '') return { kind: 'unconfirmed', transaction, errorReason: errorReason ?? 'unconfirmed' };
  return { kind: 'refused', errorReason: errorReason ?? 'settlement_refused' };
}

/**
 * The fee payer a facilitator names for Solana payments on `network` (its GET /supported), which
 * our 402 must give clients when the facilitator settles. Undefined when it names none or cannot
 * be read within the bound.
 */
export async function facilitatorFeePayer(
  facilitatorUrl: string,
  network: string,
  options: { timeoutMs: number; fetch?: typeof fetch },
): Promise<string | undefined> {
  const send = options.fetch ?? fetch;
  try {
    const response = await send(`${facilitatorUrl.replace(/\/+$/, '')}/supported`, {
      headers: { accept: 'application/json' },
      signal: AbortSignal.timeout(options.timeoutMs),
      redirect: 'error',
    });
    const text = await readBounded(response, MAX_FACILITATOR_RESPONSE_BYTES);
    if (!response.ok || text === undefined) return undefined;
    const body: unknown = JSON.parse(text);
    const kinds = isPlainObject(body) && Array.isArray(body.kinds) ? body.kinds : [];
    for (const kind of kinds) {
      if (
        !isPlainObject(kind) ||
        kind.x402Version !== X402_VERSION ||
        kind.scheme !== 'exact' ||
        kind.network !== network
      )
        continue;
      const feePayer = isPlainObject(kind.extra) ? kind.extra.feePayer : undefined;
      if (typeof feePayer === 'string' && feePayer !== '') return feePayer;
    }
    return undefined;
  } catch {
    return undefined;
  }
}
