/**
 * Solana side of relay payments: strict verification of an x402 exact payment paid to us, and the
 * transactions our wallet signs (co-signing a client's payment as fee payer, refunding a payer).
 *
 * The payment must have the shape of docs/architecture.md section 4, checked in svmShape.ts (legacy or v0,
 * compute budget, one exact TransferChecked into our payTo's USDC account, an optional Memo, our
 * fee payer in no instruction). Then the cluster: blockhash still valid, the payer's balance, and
 * a simulation (with our signature when we are the fee payer, so the cluster checks every
 * signature). Co-signing fills our slot of the message bytes as they came, whatever their version.
 *
 * A Solana transaction's id is its fee payer's signature: ours is deterministic, so the id is known
 * and stored before anything is sent.
 */
import {
  appendTransactionMessageInstructions,
  createTransactionMessage,
  fetchEncodedAccounts,
  getBase64EncodedWireTransaction,
  getSignatureFromTransaction,
  isAddress,
  isSolanaError,
  partiallySignTransaction,
  pipe,
  setTransactionMessageFeePayerSigner,
  setTransactionMessageLifetimeUsingBlockhash,
  signTransactionMessageWithSigners,
  SOLANA_ERROR__JSON_RPC__SERVER_ERROR_SEND_TRANSACTION_PREFLIGHT_FAILURE,
  type Address,
  type Blockhash,
  type Signature,
  type Transaction,
} from '@solana/kit';
import { getSetComputeUnitLimitInstruction, getSetComputeUnitPriceInstruction } from '@solana-program/compute-budget';
import {
  AccountState,
  getTokenDecoder,
  getTokenSize,
  getTransferCheckedInstruction,
  TOKEN_PROGRAM_ADDRESS,
} from '@solana-program/token';
import { USDC_DECIMALS, usdcAccountOf, type SvmNetworkClients } from '../networks/svm';
import type { NetworkName } from '../networkTable';
import { type PaymentPayload, type PaymentRequirements } from '../x402/types';
import { fail, ok, type Result } from '../result';
import { inspectSolanaPayment, type InspectedSolanaPayment } from './svmShape';
import type { Deps } from '../deps';
import type { RelayLimits } from '../relayLimits';
import type { VerifiedClientPayment, VerifyFailureReason } from './types';

export { inspectSolanaPayment, type InspectedSolanaPayment } from './svmShape';

/** Our refunds: a TransferChecked uses about 6,200 units; the price is the smallest non-zero one. */
const REFUND_COMPUTE_UNIT_PRICE_MICRO_LAMPORTS = 1n;
const REFUND_COMPUTE_UNIT_LIMIT_BASE = 20_000;
/** The refund's compute unit limit varies with the relay transaction id, so two refunds of the same amount to the same payer are distinct transactions. */
const REFUND_COMPUTE_UNIT_LIMIT_SPREAD = 100_000n;

type Failure = { ok: false; reason: VerifyFailureReason; details: string };

function describe(value: unknown): string {
  // JSON.stringify answers undefined for undefined (and functions), whatever its declared type.
  const json = JSON.stringify(value, (_key, item: unknown) => (typeof item === 'bigint' ? item.toString() : item)) as
    string | undefined;
  return json ?? String(value);
}

function rpcUnavailable(error: unknown): Failure {
  return fail('rpc_unavailable', error instanceof Error ? error.message : String(error));
}

function bounded(limits: RelayLimits) {
  return { abortSignal: AbortSignal.timeout(limits.rpcTimeoutMs) };
}

function readTokenAccount(account: { exists: boolean } & Partial<{ programAddress: Address; data: Uint8Array }>) {
  if (!account.exists || account.programAddress !== TOKEN_PROGRAM_ADDRESS || account.data?.length !== getTokenSize())
    return undefined;
  return getTokenDecoder().decode(account.data);
}

function clientsOf(deps: Pick<Deps, 'chains'>, network: NetworkName): SvmNetworkClients | undefined {
  return deps.chains.svm.networks.get(network);
}

/** The payment signed by us as fee payer, when we are the fee payer it names. */
export async function coSign(
  deps: Pick<Deps, 'chains'>,
  inspected: InspectedSolanaPayment,
): Promise<Transaction | undefined> {
  const signer = deps.chains.svm.signer;
  if (!signer || signer.address !== inspected.feePayer) return undefined;
  return partiallySignTransaction([signer.keyPair], inspected.transaction);
}

/** Cluster checks: blockhash, balance, not processed yet (when we can know the id), simulation. */
export async function checkWithCluster(
  deps: Pick<Deps, 'chains' | 'clock' | 'relayLimits'>,
  network: NetworkName,
  inspected: InspectedSolanaPayment,
): Promise<Result<{ coSigned: Transaction | undefined }, VerifyFailureReason>> {
  const clients = clientsOf(deps, network);
  if (!clients) return fail('network_not_offered', `${network} is not an enabled Solana network`);
  const limits = deps.relayLimits;
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
  deps: Pick<Deps, 'chains' | 'clock' | 'relayLimits'>,
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
  const inspected = await inspectSolanaPayment(payment, offered, clients.usdc, deps.relayLimits);
  if (!inspected.ok) return inspected;
  const cluster = await checkWithCluster(deps, network, inspected.value);
  if (!cluster.ok) return cluster;
  return ok({
    network,
    chainType: 'solana',
    payer: inspected.value.payer,
    payTo: offered.payTo,
    asset: clients.usdc,
    amountMicroUsdc: inspected.value.amount,
    idempotencyKey: { network, asset: clients.usdc, nonceKey: inspected.value.payerSignature },
    payment,
    requirements: offered,
    inspected: inspected.value,
    coSigned: cluster.value.coSigned,
  });
}

export type SendOutcome =
  { sent: true } | { sent: false; refused: true; details: string } | { sent: false; refused: false; details: string };

/**
 * Sends a fully signed transaction. A preflight refusal is definite (the node did not forward it);
 * any other error leaves the outcome unknown, to be read from the cluster later.
 */
export async function sendSolanaTransaction(
  deps: Pick<Deps, 'chains' | 'relayLimits'>,
  network: NetworkName,
  transaction: Transaction,
): Promise<SendOutcome> {
  const clients = clientsOf(deps, network);
  if (!clients) return { sent: false, refused: true, details: `${network} is not an enabled Solana network` };
  try {
    await clients.rpc
      .sendTransaction(getBase64EncodedWireTransaction(transaction), {
        encoding: 'base64',
        preflightCommitment: 'confirmed',
      })
      .send(bounded(deps.relayLimits));
    return { sent: true };
  } catch (error) {
    const details = error instanceof Error ? error.message : String(error);
    if (isSolanaError(error, SOLANA_ERROR__JSON_RPC__SERVER_ERROR_SEND_TRANSACTION_PREFLIGHT_FAILURE))
      return { sent: false, refused: true, details };
    return { sent: false, refused: false, details };
  }
}

export type ConfirmationOutcome =
  { status: 'confirmed' } | { status: 'failed'; details: string } | { status: 'pending' };

/** Polls the signature at most `timeoutMs`; a timeout or an unreachable node is pending. */
export async function waitForConfirmation(
  deps: Pick<Deps, 'chains'>,
  network: NetworkName,
  signature: string,
  { timeoutMs, pollMs }: { timeoutMs: number; pollMs: number },
): Promise<ConfirmationOutcome> {
  const status = await deps.chains.svm.waitForSignature(network, signature, { timeoutMs, pollMs });
  return confirmationOf(status);
}

export async function readConfirmation(
  deps: Pick<Deps, 'chains'>,
  network: NetworkName,
  signature: string,
): Promise<ConfirmationOutcome> {
  return confirmationOf(await deps.chains.svm.signatureStatus(network, signature));
}

function confirmationOf(status: Awaited<ReturnType<Deps['chains']['svm']['signatureStatus']>>): ConfirmationOutcome {
  if (!status.ok || !status.value.found) return { status: 'pending' };
  const { confirmationStatus, failed, err } = status.value;
  if (confirmationStatus !== 'confirmed' && confirmationStatus !== 'finalized') return { status: 'pending' };
  return failed ? { status: 'failed', details: describe(err) } : { status: 'confirmed' };
}

/** Whether a transaction with this blockhash can still land: false once the cluster has forgotten it. */
export async function blockhashStillValid(
  deps: Pick<Deps, 'chains' | 'relayLimits'>,
  network: NetworkName,
  blockhash: string,
): Promise<Result<boolean, 'rpc_unavailable'>> {
  const clients = clientsOf(deps, network);
  if (!clients) return fail('rpc_unavailable', `${network} is not an enabled Solana network`);
  try {
    const { value } = await clients.rpc
      .isBlockhashValid(blockhash as Blockhash, { commitment: 'confirmed' })
      .send(bounded(deps.relayLimits));
    return ok(value);
  } catch (error) {
    return fail('rpc_unavailable', error instanceof Error ? error.message : String(error));
  }
}

export type RefundBuildFailure =
  'no_wallet' | 'network_not_enabled' | 'destination_account_missing' | 'insufficient_funds' | 'rpc_unavailable';

/**
 * Our refund: fee payer and authority are our wallet; TransferChecked from our USDC account to the
 * payer's, which must exist (we never pay into a missing account). Signed, not sent.
 */
export async function buildSolanaRefund(
  deps: Pick<Deps, 'chains' | 'relayLimits'>,
  network: NetworkName,
  input: { recipient: string; amount: bigint; relayTransactionId: bigint },
): Promise<Result<{ transaction: Transaction; signature: Signature; blockhash: string }, RefundBuildFailure>> {
  const clients = clientsOf(deps, network);
  if (!clients) return fail('network_not_enabled', `${network} is not an enabled Solana network`);
  const signer = deps.chains.svm.signer;
  if (!signer) return fail('no_wallet', 'SOLANA_PRIVATE_KEY is not configured');
  if (!isAddress(input.recipient))
    return fail('destination_account_missing', `${input.recipient} is not a Solana address`);
  const limits = deps.relayLimits;
  const { rpc, usdc } = clients;
  const source = await usdcAccountOf(signer.address, usdc);
  const destination = await usdcAccountOf(input.recipient, usdc);
  try {
    const [sourceAccount, destinationAccount] = await fetchEncodedAccounts<[string, string]>(
      rpc,
      [source, destination],
      {
        ...bounded(limits),
        commitment: 'confirmed',
      },
    );
    const destinationToken = readTokenAccount(destinationAccount);
    if (
      !destinationToken ||
      destinationToken.mint !== usdc ||
      destinationToken.owner !== input.recipient ||
      destinationToken.state !== AccountState.Initialized
    ) {
      return fail('destination_account_missing', `the USDC account of ${input.recipient} is missing or unusable`);
    }
    const balance = readTokenAccount(sourceAccount)?.amount ?? 0n;
    if (balance < input.amount)
      return fail(
        'insufficient_funds',
        `our USDC balance on ${network} is ${balance}, the refund needs ${input.amount}`,
      );
    const { value: blockhash } = await rpc.getLatestBlockhash({ commitment: 'confirmed' }).send(bounded(limits));
    const message = pipe(
      createTransactionMessage({ version: 0 }),
      (draft) => setTransactionMessageFeePayerSigner(signer, draft),
      (draft) => setTransactionMessageLifetimeUsingBlockhash(blockhash, draft),
      (draft) =>
        appendTransactionMessageInstructions(
          [
            getSetComputeUnitLimitInstruction({
              units:
                REFUND_COMPUTE_UNIT_LIMIT_BASE + Number(input.relayTransactionId % REFUND_COMPUTE_UNIT_LIMIT_SPREAD),
            }),
            getSetComputeUnitPriceInstruction({ microLamports: REFUND_COMPUTE_UNIT_PRICE_MICRO_LAMPORTS }),
            getTransferCheckedInstruction({
              source,
              mint: usdc,
              destination,
              authority: signer,
              amount: input.amount,
              decimals: USDC_DECIMALS,
            }),
          ],
          draft,
        ),
    );
    const transaction = await signTransactionMessageWithSigners(message);
    return ok({ transaction, signature: getSignatureFromTransaction(transaction), blockhash: blockhash.blockhash });
  } catch (error) {
    return fail('rpc_unavailable', error instanceof Error ? error.message : String(error));
  }
}
