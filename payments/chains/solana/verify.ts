/**
 * A client's x402 exact payment paid to us on Solana, checked strictly, and co-signed by our wallet
 * as fee payer when we settle it (submit.ts sends it).
 *
 * The payment must have the shape of docs/architecture.md section 4, checked in shape.ts (legacy or v0,
 * compute budget, one exact TransferChecked into our payTo's USDC account, an optional Memo, our
 * fee payer in no instruction). Then the cluster: blockhash still valid, the payer's balance, and
 * a simulation (with our signature when we are the fee payer, so the cluster checks every
 * signature). Co-signing fills our slot of the message bytes as they came, whatever their version.
 */
import {
  fetchEncodedAccounts,
  getBase64EncodedWireTransaction,
  getSignatureFromTransaction,
  partiallySignTransaction,
  type Address,
  type Transaction,
} from '@solana/kit';
import { AccountState, getTokenDecoder, getTokenSize, TOKEN_PROGRAM_ADDRESS } from '@solana-program/token';
import type { SvmNetworkClients } from './index';
import { NETWORK_TABLE, type NetworkName } from '../../basics/networkTable';
import { assetToMicro } from '../../basics/money';
import { type PaymentPayload, type PaymentRequirements } from '../../x402/types';
import { fail, ok, type Result } from '../../basics/result';
import { inspectSolanaPayment, type InspectedSolanaPayment } from './shape';
import type { ChainDeps as Deps } from '../types';
import type { PaymentBounds } from '../../basics/paymentBounds';
import type { VerifiedClientPayment, VerifyFailureReason } from '../types';

export { inspectSolanaPayment, type InspectedSolanaPayment } from './shape';

type Failure = { ok: false; reason: VerifyFailureReason; details: string };

export function describe(value: unknown): string {
  // JSON.stringify answers undefined for undefined (and functions), whatever its declared type.
  const json = JSON.stringify(value, (_key, item: unknown) => (typeof item === 'bigint' ? item.toString() : item)) as
    string | undefined;
  return json ?? String(value);
}

function rpcUnavailable(error: unknown): Failure {
  return fail('rpc_unavailable', error instanceof Error ? error.message : String(error));
}

export function bounded(limits: PaymentBounds) {
  return { abortSignal: AbortSignal.timeout(limits.rpcTimeoutMs) };
}

export function readTokenAccount(
  account: { exists: boolean } & Partial<{ programAddress: Address; data: Uint8Array }>,
) {
  if (!account.exists || account.programAddress !== TOKEN_PROGRAM_ADDRESS || account.data?.length !== getTokenSize())
    return undefined;
  return getTokenDecoder().decode(account.data);
}

export function clientsOf(deps: Pick<Deps, 'chains'>, network: NetworkName): SvmNetworkClients | undefined {
  return deps.chains.svm.networks.get(network);
}

/** The payment signed by us as fee payer, when we are the fee payer it names. */
async function coSign(deps: Pick<Deps, 'chains'>, inspected: InspectedSolanaPayment): Promise<Transaction | undefined> {
  const signer = deps.chains.svm.signer;
  if (!signer || signer.address !== inspected.feePayer) return undefined;
  return partiallySignTransaction([signer.keyPair], inspected.transaction);
}

/** Cluster checks: blockhash, balance, not processed yet (when we can know the id), simulation. */
async function checkWithCluster(
  deps: Pick<Deps, 'chains' | 'clock' | 'paymentBounds'>,
  network: NetworkName,
  inspected: InspectedSolanaPayment,
): Promise<Result<{ coSigned: Transaction | undefined }, VerifyFailureReason>> {
  const clients = clientsOf(deps, network);
  if (!clients) return fail('network_not_offered', `${network} is not an enabled Solana network`);
  const limits = deps.paymentBounds;
  const { rpc } = clients;
  try {
    const { value: blockhashValid } = await rpc
      .isBlockhashValid(inspected.blockhash, { commitment: 'confirmed' })
      .send(bounded(limits));
    if (!blockhashValid) return fail('expired', 'the transaction blockhash is no longer valid');
    // One account per address asked, in order.
    const [source, destination] = await fetchEncodedAccounts<[string, string]>(
      rpc,
      [inspected.source, inspected.destination],
      {
        ...bounded(limits),
        commitment: 'confirmed',
      },
    );
    const sourceToken = readTokenAccount(source);
    if (!sourceToken) return fail('insufficient_funds', `the payer's token account ${inspected.source} does not exist`);
    if (
      sourceToken.mint !== clients.usdc ||
      sourceToken.owner !== inspected.payer ||
      sourceToken.state !== AccountState.Initialized
    ) {
      return fail('invalid_transaction', `${inspected.source} is not a usable USDC account of ${inspected.payer}`);
    }
    if (sourceToken.amount < inspected.amount) {
      return fail(
        'insufficient_funds',
        `${inspected.payer} holds ${sourceToken.amount}, the payment needs ${inspected.amount}`,
      );
    }
    if (!readTokenAccount(destination))
      return fail('invalid_offer', `our USDC account ${inspected.destination} does not exist`);

    const coSigned = await coSign(deps, inspected);
    if (coSigned) {
      const { value: statuses } = await rpc
        .getSignatureStatuses([getSignatureFromTransaction(coSigned)], { searchTransactionHistory: true })
        .send(bounded(limits));
      if (statuses[0]) return fail('nonce_already_used', 'this transaction was already submitted');
    }
    // Without our signature (a facilitator's fee payer), the cluster checks everything but signatures; we checked the payer's.
    const wire = getBase64EncodedWireTransaction(coSigned ?? inspected.transaction);
    const { value: simulation } = await rpc
      .simulateTransaction(wire, { encoding: 'base64', sigVerify: coSigned !== undefined, commitment: 'confirmed' })
      .send(bounded(limits));
    if (simulation.err !== null) {
      return fail(
        'simulation_failed',
        `simulation failed: ${describe(simulation.err)}${simulation.logs?.length ? `; ${simulation.logs.slice(-3).join(' | ')}` : ''}`,
      );
    }
    return ok({ coSigned });
  } catch (error) {
    return rpcUnavailable(error);
  }
}

export async function verifySolanaPayment(
  payment: PaymentPayload,
  offered: PaymentRequirements,
  network: NetworkName,
  deps: Pick<Deps, 'chains' | 'clock' | 'paymentBounds'>,
): Promise<
  Result<
    VerifiedClientPayment & { inspected: InspectedSolanaPayment; coSigned: Transaction | undefined },
    VerifyFailureReason
  >
> {
  const clients = clientsOf(deps, network);
  if (!clients) return fail('network_not_offered', `${network} is not an enabled Solana network`);
  const ours = deps.chains.svm.signer?.address;
  if (ours !== undefined && offered.payTo !== ours)
    return fail('invalid_offer', `the offered payTo ${offered.payTo} is not our wallet`);
  const inspected = await inspectSolanaPayment(payment, offered, clients.usdc, deps.paymentBounds);
  if (!inspected.ok) return inspected;
  const cluster = await checkWithCluster(deps, network, inspected.value);
  if (!cluster.ok) return cluster;
  return ok({
    network,
    chainType: 'solana',
    payer: inspected.value.payer,
    payTo: offered.payTo,
    asset: clients.usdc,
    amountMicroUsdc: assetToMicro(inspected.value.amount, NETWORK_TABLE[network].decimals),
    idempotencyKey: { network, asset: clients.usdc, nonceKey: inspected.value.payerSignature },
    payment,
    requirements: offered,
    inspected: inspected.value,
    coSigned: cluster.value.coSigned,
  });
}
