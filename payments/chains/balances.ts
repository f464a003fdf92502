import { assetToMicro } from '../basics/money';
import { NETWORK_TABLE } from '../basics/networkTable';
import type { PaymentChoice } from '../x402/choose';
import type { Chains } from './types';

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
  async evmShortage(
    chains: Chains,
    choice: PaymentChoice,
    nowMs: number,
  ): Promise<{ reason: string; details: string } | undefined> {
    const wallet = chains.evm.account?.address;
    if (wallet === undefined) return undefined;
    const known = this.known;
    const key = `${choice.network}:${wallet}`;
    const headroom = known.get(key);
    if (
      headroom &&
      nowMs - headroom.readAtMs < BALANCE_FRESH_MS &&
      nowMs >= headroom.readAtMs &&
      headroom.microUsdc >= choice.amountMicroUsdc
    ) {
      headroom.microUsdc -= choice.amountMicroUsdc;
      return undefined;
    }
    const balance = await chains.evm.usdcBalance(choice.network, wallet);
    if (!balance.ok) {
      known.delete(key);
      return {
        reason: balance.reason,
        details: `our USDC balance on ${choice.network} could not be read: ${balance.details}`,
      };
    }
    // In micro-USDC by the asset's decimals, as choice.amountMicroUsdc is (MegaUSD has 18).
    const held = assetToMicro(balance.value, NETWORK_TABLE[choice.network].decimals);
    known.set(key, {
      microUsdc: held >= choice.amountMicroUsdc ? held - choice.amountMicroUsdc : 0n,
      readAtMs: nowMs,
    });
    if (held < choice.amountMicroUsdc) {
      return {
        reason: 'insufficient_funds',
        details: `our USDC balance on ${choice.network} is ${held} micro-USDC, the payment needs ${choice.amountMicroUsdc}`,
      };
    }
    return undefined;
  }
}
