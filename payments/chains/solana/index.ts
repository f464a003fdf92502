/**
 * The service wallet on Solana (@solana/kit): the signer from SOLANA_PRIVATE_KEY (wallet.ts),
 * per-network RPC clients (rpc.ts), the reads a payment needs (reads.ts), and the x402 exact
 * payment we send to targets (payments.ts, built from the transaction in transactions.ts;
 * docs/architecture.md section 4): a v0 transaction whose fee payer is the target's facilitator
 * (extra.feePayer), with SetComputeUnitLimit, SetComputeUnitPrice and one TransferChecked of
 * exactly the amount from our USDC account to the payTo's associated USDC account, signed by us
 * only. The facilitator co-signs and submits.
 *
 * JSON-RPC over HTTP only, no websocket subscriptions: confirmation is learned by polling
 * getSignatureStatuses. Every request carries an abort signal with a timeout.
 */
import type { KeyPairSigner } from '@solana/kit';
import type { Config } from '../../basics/config';
import type { PaymentRequirements } from '../../x402/types';
import type { Result } from '../../basics/result';
import type { NetworkName } from '../../basics/networkTable';
import type { RpcObserver } from '../rpcTiming';
import { buildExactPayment, type BuildFailureReason, type BuiltSolanaPayment } from './payments';
import { createSvmReads, type SvmReads } from './reads';
import { createSvmRpc, DEFAULT_RPC_TIMEOUT_MS, type SvmNetworkClients } from './rpc';
import { solanaSignerFromKey } from './wallet';

export { solanaSecretKeyBytes, solanaSignerFromKey } from './wallet';
export { DEFAULT_RPC_TIMEOUT_MS, type ReadFailureReason, type SolanaRpc, type SvmNetworkClients } from './rpc';
export {
  COMPUTE_UNIT_LIMIT_RANGE,
  COMPUTE_UNIT_PRICE_MICRO_LAMPORTS_RANGE,
  exactPaymentMessage,
  USDC_DECIMALS,
  usdcAccountOf,
} from './transactions';
export { type BuildFailureReason, type BuiltSolanaPayment } from './payments';
export { DEFAULT_CONFIRMATION_POLL_MS, DEFAULT_CONFIRMATION_TIMEOUT_MS, type SignatureStatus } from './reads';

/** Our wallet on the Solana clusters: building exact payments, and the reads of createSvmReads. */
export interface SvmChains extends SvmReads {
  signer: KeyPairSigner | undefined;
  networks: ReadonlyMap<NetworkName, SvmNetworkClients>;
  buildExactPayment(requirements: PaymentRequirements): Promise<Result<BuiltSolanaPayment, BuildFailureReason>>;
}

// Our Solana wallet is the `svm` member of the service's Chains (chains/types.ts names no family).
declare module '../types' {
  interface FamilyWallets {
    svm: SvmChains;
  }
  interface FamilySigningFailures {
    svm: BuildFailureReason;
  }
}

export interface SvmOptions {
  rpcTimeoutMs?: number;
  /** Told of every JSON-RPC request (the service's metrics). */
  onRpc?: RpcObserver;
}

export async function createSvmChains(
  config: Pick<Config, 'networks' | 'solanaPrivateKey'>,
  options: SvmOptions = {},
): Promise<SvmChains> {
  const signer = config.solanaPrivateKey === undefined ? undefined : await solanaSignerFromKey(config.solanaPrivateKey);
  const rpc = createSvmRpc(config, options.rpcTimeoutMs ?? DEFAULT_RPC_TIMEOUT_MS, options.onRpc);
  return {
    signer,
    networks: rpc.networks,
    buildExactPayment: (requirements) => buildExactPayment(rpc, signer, requirements),
    // Closures over rpc, not methods: they need no `this`.
    ...createSvmReads(rpc),
  };
}
