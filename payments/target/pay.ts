/**
 * Paying a target from the service wallet, the steps /proxy and /relay share: sign the payment for
 * the chosen requirement (bounded in time, our balance read first), then send the call with that
 * one X-PAYMENT at most MAX_PAID_ATTEMPTS times. What the caller records before sending, and what
 * it concludes afterwards, is its own.
 */
import type { Deps } from '../deps';
import type { Chains, PreparedPayment } from '../networks/index';
import { buildTargetRequest, type CallRequest, type TargetRequest, type TargetResponse } from '../outbound/index';
import type { PaymentChoice } from '../x402/choose';
import { decodePaymentResponseHeader } from '../x402/headers';
import { callTarget, type TargetCall } from './call';
import type { SignedTargetPayment } from './chain';

/** Paid attempts per call, all with the one payment we signed: a target that still answers 402 has refused it. */
export const MAX_PAID_ATTEMPTS = 2;

/** Failures that come from the target's requirements (the target's fault); every other one is ours. */
const TARGET_SIDE_SIGN_FAILURES = new Set([
  'invalid_requirements',
  'asset_mismatch',
  'missing_fee_payer',
  'invalid_fee_payer',
  'destination_account_missing',
  'destination_account_invalid',
  'not_evm_network',
  'not_solana_network',
]);

export type SignedPayment = { ok: true; value: PreparedPayment } | { ok: false; reason: string; details: string; targetSide: boolean };

/**
 * Signs our payment for `choice`. An EVM authorization is valid at most `windowSeconds` (shorter
 * when the target asks) and uses `nonce`, recorded by the caller beforehand where it wants; a
 * wallet short of USDC is refused before signing (signing needs no funds, so the shortage would
 * otherwise only show as the target's refusal; the Solana builder reads the balance itself).
 */
export async function signTargetPayment(
  deps: Pick<Deps, 'chains' | 'clock' | 'balances'>,
  choice: PaymentChoice,
  { nonce, windowSeconds }: { nonce?: `0x${string}`; windowSeconds: number },
): Promise<SignedPayment> {
  if (choice.chainType === 'evm') {
    const shortage = await deps.balances.evmShortage(deps.chains, choice, deps.clock.now().getTime());
    if (shortage) return { ok: false, ...shortage, targetSide: false };
  }
  const requirements =
    choice.chainType === 'evm'
      ? { ...choice.requirements, maxTimeoutSeconds: Math.min(choice.requirements.maxTimeoutSeconds, windowSeconds) }
      : choice.requirements;
  const prepared = await deps.chains.createPayment(
    { ...choice, requirements },
    { now: deps.clock.now(), ...(choice.chainType === 'evm' && nonce !== undefined ? { nonce } : {}) },
  );
  if (prepared.ok) return prepared;
  return { ok: false, reason: prepared.reason, details: prepared.details, targetSide: TARGET_SIDE_SIGN_FAILURES.has(prepared.reason) };
}

/**
 * Our balance as last read on a network, less every payment signed since: a payment that fits in
 * it needs no new read. Pessimistic by construction (a payment that never settles still counts
 * until the next read), and read again at least every BALANCE_FRESH_MS, so that what another
 * process paid from the same wallet is seen soon. Should a payment pass on a stale view anyway,
 * the chain refuses it and the caller's watch releases or refunds as for any unsettled payment.
 * One per process (Deps.balances), shared by every mode that pays from the wallet.
 */
export const BALANCE_FRESH_MS = 5_000;

export class WalletBalances {
  private readonly known = new Map<string, { microUsdc: bigint; readAtMs: number }>();

  /** Why our wallet cannot pay `choice` now (its balance is short or unreadable), or undefined when it can. */
  async evmShortage(chains: Chains, choice: PaymentChoice, nowMs: number): Promise<{ reason: string; details: string } | undefined> {
    const wallet = chains.evm.account?.address;
    if (wallet === undefined) return undefined;
    const known = this.known;
    const key = `${choice.network}:${wallet}`;
    const headroom = known.get(key);
    if (headroom && nowMs - headroom.readAtMs < BALANCE_FRESH_MS && nowMs >= headroom.readAtMs && headroom.microUsdc >= choice.amountMicroUsdc) {
      headroom.microUsdc -= choice.amountMicroUsdc;
      return undefined;
    }
    const balance = await chains.evm.usdcBalance(choice.network, wallet);
    if (!balance.ok) {
      known.delete(key);
      return { reason: balance.reason, details: `our USDC balance on ${choice.network} could not be read: ${balance.details}` };
    }
    known.set(key, { microUsdc: balance.value >= choice.amountMicroUsdc ? balance.value - choice.amountMicroUsdc : 0n, readAtMs: nowMs });
    if (balance.value < choice.amountMicroUsdc) {
      return { reason: 'insufficient_funds', details: `our USDC balance on ${choice.network} is ${balance.value}, the payment needs ${choice.amountMicroUsdc}` };
    }
    return undefined;
  }
}

/** What to record about a signed payment before it leaves, so the chain can be read for it later. */
export function signedFacts(
  payment: PreparedPayment,
): { payer: string } & Pick<SignedTargetPayment, 'payerSignature' | 'validBefore' | 'lastValidBlockHeight'> {
  const solana = 'blockHeight' in payment.expiresAt;
  return {
    payer: payment.payer,
    payerSignature: solana ? payment.reference : null,
    validBefore: 'unixSeconds' in payment.expiresAt ? payment.expiresAt.unixSeconds : null,
    lastValidBlockHeight: 'blockHeight' in payment.expiresAt ? payment.expiresAt.blockHeight : null,
  };
}

/** The call again with our X-PAYMENT, repeated (same payment) while the target answers 402, at most MAX_PAID_ATTEMPTS times. */
export async function sendPaidCall(
  call: CallRequest,
  paymentHeader: string,
  remainingMs: () => number,
  deps: Pick<Deps, 'config' | 'resolver' | 'connections'>,
): Promise<TargetCall> {
  const built = buildTargetRequest(call, { paymentHeader }) as { ok: true; value: TargetRequest };
  let answer = await callTarget(built.value, remainingMs(), deps);
  for (let attempt = 2; attempt <= MAX_PAID_ATTEMPTS && answer.ok && answer.response.status === 402; attempt += 1) {
    answer = await callTarget(built.value, remainingMs(), deps);
  }
  return answer;
}

/** The transaction a target reports in X-PAYMENT-RESPONSE as its settlement of our payment: a hint, never a proof. */
export function reportedSettlement(response: TargetResponse): string | undefined {
  const settlement = decodePaymentResponseHeader(response.headers['x-payment-response']);
  return settlement.ok && settlement.value.success && settlement.value.transaction !== '' ? settlement.value.transaction : undefined;
}
