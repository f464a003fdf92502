/**
 * The transactions our wallet sends on Solana (a client's payment co-signed as fee payer, a refund
 * to a payer), and what follows a send: its confirmation polled, bounded, and whether its blockhash
 * still lets it land. A Solana transaction's id is its fee payer's signature: ours is
 * deterministic, so the id is known and stored before anything is sent.
 */
import {
  appendTransactionMessageInstructions,
  createTransactionMessage,
  fetchEncodedAccounts,
  getBase64EncodedWireTransaction,
  getSignatureFromTransaction,
  isAddress,
  isSolanaError,
  pipe,
  setTransactionMessageFeePayerSigner,
  setTransactionMessageLifetimeUsingBlockhash,
  signTransactionMessageWithSigners,
  SOLANA_ERROR__JSON_RPC__SERVER_ERROR_SEND_TRANSACTION_PREFLIGHT_FAILURE,
  type Blockhash,
  type Signature,
  type Transaction,
} from '@solana/kit';
import { getSetComputeUnitLimitInstruction, getSetComputeUnitPriceInstruction } from '@solana-program/compute-budget';
import { AccountState, getTransferCheckedInstruction } from '@solana-program/token';
import type { NetworkName } from '../../basics/networkTable';
import { fail, ok, type Result } from '../../basics/result';
import type { ChainDeps as Deps } from '../types';
import { USDC_DECIMALS, usdcAccountOf } from './transactions';
import { bounded, clientsOf, describe, readTokenAccount } from './verify';

/** Our refunds: a TransferChecked uses about 6,200 units; the price is the smallest non-zero one. */
const REFUND_COMPUTE_UNIT_PRICE_MICRO_LAMPORTS = 1n;
const REFUND_COMPUTE_UNIT_LIMIT_BASE = 20_000;
/** The refund's compute unit limit varies with the relay transaction id, so two refunds of the same amount to the same payer are distinct transactions. */
const REFUND_COMPUTE_UNIT_LIMIT_SPREAD = 100_000n;

/** refused: the node did not take it (definite); unknown: it may have been forwarded, the cluster tells later. */
export type SendOutcome =
  { kind: 'sent' } | { kind: 'refused'; details: string } | { kind: 'unknown'; details: string };

/**
 * Sends a fully signed transaction. A preflight refusal is definite (the node did not forward it);
 * any other error leaves the outcome unknown, to be read from the cluster later.
 */
export async function sendSolanaTransaction(
  deps: Pick<Deps, 'chains' | 'paymentBounds'>,
  network: NetworkName,
  transaction: Transaction,
): Promise<SendOutcome> {
  const clients = clientsOf(deps, network);
  if (!clients) return { kind: 'refused', details: `${network} is not an enabled Solana network` };
  try {
    await clients.rpc
      .sendTransaction(getBase64EncodedWireTransaction(transaction), {
        encoding: 'base64',
        preflightCommitment: 'confirmed',
      })
      .send(bounded(deps.paymentBounds));
    return { kind: 'sent' };
  } catch (error) {
    const details = error instanceof Error ? error.message : String(error);
    if (isSolanaError(error, SOLANA_ERROR__JSON_RPC__SERVER_ERROR_SEND_TRANSACTION_PREFLIGHT_FAILURE))
      return { kind: 'refused', details };
    return { kind: 'unknown', details };
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
  if (!status.ok || status.value.kind !== 'found') return { status: 'pending' };
  const { confirmationStatus, failed, err } = status.value;
  if (confirmationStatus !== 'confirmed' && confirmationStatus !== 'finalized') return { status: 'pending' };
  return failed ? { status: 'failed', details: describe(err) } : { status: 'confirmed' };
}

/** Whether a transaction with this blockhash can still land: false once the cluster has forgotten it. */
export async function blockhashStillValid(
  deps: Pick<Deps, 'chains' | 'paymentBounds'>,
  network: NetworkName,
  blockhash: string,
): Promise<Result<boolean, 'rpc_unavailable'>> {
  const clients = clientsOf(deps, network);
  if (!clients) return fail('rpc_unavailable', `${network} is not an enabled Solana network`);
  try {
    const { value } = await clients.rpc
      .isBlockhashValid(blockhash as Blockhash, { commitment: 'confirmed' })
      .send(bounded(deps.paymentBounds));
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
  deps: Pick<Deps, 'chains' | 'paymentBounds'>,
  network: NetworkName,
  input: { recipient: string; amount: bigint; relayTransactionId: bigint },
): Promise<Result<{ transaction: Transaction; signature: Signature; blockhash: string }, RefundBuildFailure>> {
  const clients = clientsOf(deps, network);
  if (!clients) return fail('network_not_enabled', `${network} is not an enabled Solana network`);
  const signer = deps.chains.svm.signer;
  if (!signer) return fail('no_wallet', 'SOLANA_PRIVATE_KEY is not configured');
  if (!isAddress(input.recipient))
    return fail('destination_account_missing', `${input.recipient} is not a Solana address`);
  const limits = deps.paymentBounds;
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
