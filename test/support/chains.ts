/** Our chains on the local peers, and what settling a client's payment on them uses. */
import { systemClock } from '../../payments/basics/clock';
import { loadConfig } from '../../payments/basics/config';
import type { Deps } from '../../payments/deps';
import { DEFAULT_PAYMENT_BOUNDS } from '../../payments/incoming/types';
import { IN_PROCESS_ONLY, SubmissionQueue } from '../../payments/chains/submissions';
import { recordClientPayment } from '../../payments/incoming/store';
import { settleableOffers, type OfferOptions } from '../../payments/incoming/offer';
import { verifyClientPaymentHeader } from '../../payments/incoming/verify';
import type { PaymentRequirements } from '../../payments/x402/types';
import { createChains, type Chains } from '../../payments/chains/index';
import type { NetworkName } from '../../devnet/networks';
import { NETWORK_TABLE, type NetworkName as OurNetworkName } from '../../payments/basics/networkTable';
import type { Db } from '../../db/index';
import type { Peers } from '../../devnet/index';

/**
 * Our 402's offer on `network`, as the relay's quote makes it for a client who names that network
 * (settleableOffers; the fee payer of `options`, else our wallet).
 */
export async function relayOffer(
  chains: Chains,
  network: OurNetworkName,
  options: OfferOptions,
): Promise<PaymentRequirements> {
  const request = { ...options, networkClass: NETWORK_TABLE[network].networkClass, namedNetwork: network };
  const [offer] = await settleableOffers(chains, request, undefined);
  if (offer === undefined) throw new Error(`we offer nothing on ${network}`);
  return offer;
}

/** A client's X-PAYMENT checked against our offers, as /relay checks it. */
export function verifyXPayment(
  header: string,
  offered: readonly PaymentRequirements[],
  deps: Parameters<typeof verifyClientPaymentHeader>[2],
): ReturnType<typeof verifyClientPaymentHeader> {
  return verifyClientPaymentHeader({ version: 1, value: header }, offered, deps);
}

/**
 * Our chains on the peers' `networks` (their RPC URLs, the table's USDC), paying from the service
 * wallet of each chain type among them (no key for a chain type that is not there).
 */
export function createPeerChains(peers: Peers, networks: readonly NetworkName[]): Promise<Chains> {
  const has = (chainType: 'evm' | 'solana') => networks.some((name) => NETWORK_TABLE[name].chainType === chainType);
  return createChains({
    networks: networks.map((name) => ({ name, rpcUrl: peers.rpcUrls[name]!, usdc: NETWORK_TABLE[name].usdc })),
    evmPrivateKey: has('evm') ? peers.wallets.service.evm.privateKey : undefined,
    solanaPrivateKey: has('solana') ? peers.wallets.service.solana.secretKeyBase58 : undefined,
  });
}

/** What settling, reconciling and refunding a client's payment use. */
export type Settling = Pick<Deps, 'chains' | 'clock' | 'submissions' | 'paymentBounds' | 'config'>;

/**
 * Settling on `chains` directly (our wallet submits, confirmations polled every 20 ms for at most
 * 10 s) and the same through the facilitator at `facilitatorUrl`; one submission queue for both.
 */
export function settlingOn(chains: Chains, facilitatorUrl: string): { direct: Settling; viaFacilitator: Settling } {
  const direct: Settling = {
    chains,
    clock: systemClock,
    submissions: new SubmissionQueue(IN_PROCESS_ONLY),
    paymentBounds: { ...DEFAULT_PAYMENT_BOUNDS, confirmationTimeoutMs: 10_000, confirmationPollMs: 20 },
    config: loadConfig({}),
  };
  return { direct, viaFacilitator: { ...direct, config: { ...direct.config, facilitatorUrl } } };
}

/**
 * A client's EVM payment of `amountMicroUsdc` on `network`, signed by the peers' client wallet,
 * verified with `settling` and recorded as a relay would record it (not settled yet).
 * `validForSeconds` shortens the offer's validity (a payment close to its end); `mode: 'relay'`
 * records it as /relay does (the relay jobs act only on those).
 */
export async function recordedRelayPayment(
  peers: Peers,
  db: Db,
  settling: Settling,
  network: NetworkName,
  amountMicroUsdc: bigint,
  { validForSeconds, mode }: { validForSeconds?: number; mode?: 'relay' } = {},
) {
  const requirements = await relayOffer(settling.chains, network, {
    amountMicroUsdc,
    resource: 'http://127.0.0.1/relay',
  });
  const offer = validForSeconds === undefined ? requirements : { ...requirements, maxTimeoutSeconds: validForSeconds };
  const { header } = await peers.signEvmPayment(offer);
  const verified = await verifyXPayment(
    header,
    [offer],
    validForSeconds === undefined
      ? settling
      : { ...settling, paymentBounds: { ...settling.paymentBounds, minValiditySeconds: 1 } },
  );
  if (!verified.ok) throw new Error(`${verified.reason}: ${verified.details}`);
  const recorded = await recordClientPayment(db, verified.value, { targetUrl: 'http://127.0.0.1/paid', mode });
  if (!recorded.ok) throw new Error(recorded.reason);
  return recorded.value;
}
