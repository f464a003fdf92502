/**
 * Checks shared by the e2e files that pay a target through /proxy and /relay: what the target saw,
 * our receipt, and the records a paid call leaves (the account's credits, the proxy payment, the
 * relay transaction).
 */
import { decodePaymentRequiredHeader, decodePaymentSignatureHeader } from '@x402/core/http';
import type { PaymentPayload, PaymentRequired } from '@x402/core/types';
import { expect } from 'vitest';
import type { Db } from '../../db/index';
import type { RecordedRequest, Target } from '../../devnet/index';
import { organisationBalance } from '../../payments/accounts/credits';
import { decodePaymentResponseHeader } from '../../payments/x402/headers';
import { ledgerSums } from './proxy';
import { relayRows } from './relay';

/** Headers of a target's x402 dealings with us; our client must never see them. */
const TARGET_X402_HEADERS = ['payment-required', 'payment-response'];

export function withoutTargetHeaders(headers: Headers): void {
  for (const name of TARGET_X402_HEADERS) expect(headers.get(name), name).toBeNull();
}

/**
 * What the target's paid route saw: `unpaidCalls` unpaid calls answered 402, then one paid call
 * answered 200, which it returns.
 */
export function paidCallAfter(target: Target, unpaidCalls: number): RecordedRequest {
  const seen = target.requests.filter((request) => request.route === 'paid');
  expect(seen.map((request) => request.payment === null)).toEqual([...Array<boolean>(unpaidCalls).fill(true), false]);
  expect(seen.map((request) => request.status)).toEqual([...Array<number>(unpaidCalls).fill(402), 200]);
  return seen[unpaidCalls]!;
}

/**
 * A version 2 paid call: PAYMENT-SIGNATURE only, of version 2, its `accepted` the target's own offer
 * verbatim (re-read from a fresh unpaid call: the target's offer does not change).
 */
export async function v2PaymentOf(
  target: Target,
  paid: RecordedRequest,
): Promise<{ payment: PaymentPayload; offered: PaymentRequired }> {
  expect(paid.headers['x-payment']).toBeUndefined();
  const payment = decodePaymentSignatureHeader(paid.payment!);
  const offered = decodePaymentRequiredHeader((await fetch(target.routes.paid.url)).headers.get('payment-required')!);
  expect(payment.x402Version).toBe(2);
  expect(payment.accepted).toStrictEqual(offered.accepts[0]);
  return { payment, offered };
}

/** Our receipt (X-PAYMENT-RESPONSE, version 1 form): a success on `network` by `payer`, naming `transaction`. */
export function expectOurReceipt(headers: Headers, network: string, payer: string, transaction: string): void {
  const receipt = decodePaymentResponseHeader(headers.get('x-payment-response'));
  expect(receipt).toMatchObject({ ok: true, value: { success: true, network, payer } });
  expect(receipt.ok && receipt.value.transaction).toBe(transaction);
}

/**
 * A /proxy call paid `price` on `network` in `transaction`: the account (which had 1,000 credits)
 * paid exactly `credits`, reserved and charged, and its proxy payment is charged.
 */
export async function expectProxyCharged(
  db: Db,
  organisationId: bigint,
  { network, price, credits, transaction }: { network: string; price: bigint; credits: bigint; transaction: string },
): Promise<void> {
  expect(await organisationBalance(db, organisationId)).toBe(1_000n - credits);
  expect(await ledgerSums(db, organisationId)).toMatchObject({ reserve: credits, charge: credits, release: 0n });
  const [row] = await db
    .selectFrom('proxy_payments')
    .selectAll()
    .where('organisation_id', '=', organisationId)
    .execute();
  expect(row).toMatchObject({ state: 'charged', network, amount_micro_usdc: price, tx_hash: transaction });
}

/** The relay transaction of the client's payment `clientTx` is delivered: `total` taken, `price` paid on `network`. */
export async function expectRelayDelivered(
  db: Db,
  clientTx: string,
  { network, total, price }: { network: string; total: bigint; price: bigint },
): Promise<void> {
  const [row] = (await relayRows(db)).filter((candidate) => candidate.client_tx_hash === clientTx);
  expect(row).toMatchObject({
    state: 'delivered',
    amount_micro: total,
    target_amount_micro: price,
    target_network: network,
  });
}
