/**
 * The transactions our wallet sends on EVM networks (settling a client's authorization, refunding
 * a payer), and what follows a send: sending the same signed bytes again when a broadcast was lost,
 * telling a transaction whose nonce went to another of ours, and reading receipts.
 *
 * Our submissions are signed locally and their hash handed to the caller before broadcasting, so
 * the hash is stored first and a crash leaves a row that names the transaction.
 */
import {
  BaseError,
  keccak256,
  parseTransaction,
  TransactionReceiptNotFoundError,
  type Address,
  type Hash,
  type Hex,
} from 'viem';
import type { NetworkName } from '../../basics/networkTable';
import { fail, ok, type Result } from '../../basics/result';
import { SubmissionQueueFull } from '../submissions';
import type { ChainDeps as Deps, VerifyFailureReason } from '../types';
import { logsShowAuthorizationUse } from './abi';
import type { EvmNetworkClients } from './clients';
import { isRpcUnavailable, rpcUnavailable, simulationFailed } from './errors';
import type { CheckedAuthorization } from './verify';

function clientsOf(deps: Pick<Deps, 'chains'>, network: NetworkName): EvmNetworkClients | undefined {
  return deps.chains.evm.networks.get(network);
}

export type SubmitFailureReason =
  | 'no_wallet'
  | 'network_not_enabled'
  | 'simulation_failed'
  | 'rpc_unavailable'
  | 'submission_queue_full'
  | 'not_recorded';

export interface SubmittedTransaction {
  hash: Hash;
  /** Set when broadcasting failed after the hash was recorded: the outcome is unknown until the chain is read. */
  broadcastError?: string;
}

/**
 * How many times a broadcast refused for its nonce is signed again with the pending nonce read
 * anew (another sender of our key took the nonce between our read and our send).
 */
export const MAX_NONCE_RETRIES = 3;

/** A node's refusal of a transaction for its nonce: taken by another (too low, underpriced) or this one already held. */
export type NonceRefusal = 'already_known' | 'nonce_taken';

/** What a refused broadcast says about its nonce, across nodes' wordings (geth, hardhat, erigon, nethermind). */
export function nonceRefusalOf(error: unknown): NonceRefusal | undefined {
  const texts: string[] = [];
  const collect = (cause: unknown) => {
    const described = cause as { details?: unknown; message?: unknown; shortMessage?: unknown } | null | undefined;
    for (const text of [described?.details, described?.message, described?.shortMessage])
      if (typeof text === 'string') texts.push(text);
  };
  if (error instanceof BaseError)
    error.walk((cause) => {
      collect(cause);
      return false;
    });
  else collect(error);
  const said = texts.join('\n');
  if (/already known|known transaction|transaction already imported|already in (the )?(mem)?pool/i.test(said))
    return 'already_known';
  if (/nonce too low|nonce is too low|replacement (transaction )?underpriced|nonce has already been used/i.test(said))
    return 'nonce_taken';
  return undefined;
}

/** Whether the node knows the transaction (pending or mined); a failed read counts as not known. */
async function knownToNode(clients: EvmNetworkClients, hash: Hash): Promise<boolean> {
  try {
    await clients.publicClient.getTransaction({ hash });
    return true;
  } catch {
    return false;
  }
}

/**
 * Prepares (which simulates: gas estimation reverts on a failing call), signs, lets the caller record
 * the hash and the signed bytes (so a lost broadcast can be sent again: rebroadcastEvmTransaction), then broadcasts; serialized per network and sending key. `beforeBroadcast` returning
 * false stops it before anything leaves (the row moved on without us).
 *
 * A broadcast refused for its nonce is not lost track of: "already known" means the node holds
 * this very transaction (sent); "nonce too low" or "replacement underpriced" means another sender
 * of our key took the nonce after we read it, and that transaction can never be mined under it.
 * Unless the node knows our hash after all, the call is prepared again with the pending nonce read
 * anew, signed, and recorded in place of the refused one (`beforeBroadcast(hash, refused)`), at
 * most MAX_NONCE_RETRIES times. Every other broadcast failure keeps the recorded hash: only the
 * chain can say later whether it landed. `beforeSigning` (each time, inside the queue) refuses with
 * its own reasons.
 */
export async function submitEvmTransaction<Refusal extends string = VerifyFailureReason>(
  deps: Pick<Deps, 'chains' | 'submissions'>,
  network: NetworkName,
  call: { to: Address; data: Hex },
  beforeBroadcast: (signed: { hash: Hash; raw: Hex }, refused?: Hash) => Promise<boolean>,
  beforeSigning?: () => Promise<Result<true, Refusal>>,
): Promise<Result<SubmittedTransaction, SubmitFailureReason | Refusal>> {
  const clients = clientsOf(deps, network);
  if (!clients) return fail('network_not_enabled', `${network} is not an enabled EVM network`);
  const { walletClient, publicClient } = clients;
  if (!walletClient) return fail('no_wallet', 'EVM_PRIVATE_KEY is not configured');
  const account = walletClient.account;
  try {
    return await deps.submissions.run(
      `${network}:${account.address}`,
      async (): Promise<Result<SubmittedTransaction, SubmitFailureReason | Refusal>> => {
        let refused: Hash | undefined;
        for (let attempt = 0; ; attempt += 1) {
          if (beforeSigning) {
            const ready = await beforeSigning();
            if (!ready.ok) return ready;
          }
          let serialized: Hex;
          try {
            // The nonce is the account's pending count, read here each time.
            const request = await walletClient.prepareTransactionRequest({
              account,
              chain: walletClient.chain,
              to: call.to,
              data: call.data,
            });
            serialized = await walletClient.signTransaction(request);
          } catch (error) {
            if (isRpcUnavailable(error)) return rpcUnavailable(error);
            return simulationFailed(error);
          }
          const hash = keccak256(serialized);
          if (!(await beforeBroadcast({ hash, raw: serialized }, refused)))
            return fail('not_recorded', 'the row was no longer waiting for this transaction');
          try {
            await publicClient.sendRawTransaction({ serializedTransaction: serialized });
            return ok({ hash });
          } catch (error) {
            const broadcastError = error instanceof BaseError ? error.shortMessage : String(error);
            const refusal = nonceRefusalOf(error);
            if (refusal === 'already_known') return ok({ hash });
            if (refusal === undefined || attempt >= MAX_NONCE_RETRIES) return ok({ hash, broadcastError });
            if (await knownToNode(clients, hash)) return ok({ hash });
            refused = hash;
          }
        }
      },
    );
  } catch (error) {
    if (error instanceof SubmissionQueueFull) return fail('submission_queue_full', error.message);
    throw error;
  }
}

/** What sending a stored signed transaction again found: the node took it, already held it, refused its nonce, or failed. */
export type Rebroadcast = 'sent' | 'known' | 'nonce_taken' | 'failed';

/**
 * Sends again the signed bytes of one of our transactions that the node does not know (its
 * broadcast was lost: the connection dropped, a 503). The same bytes are the same transaction,
 * same nonce and hash: it can be mined at most once however often it is sent. `nonce_taken` means
 * another transaction of ours took its nonce meanwhile: this one can never be mined.
 */
export async function rebroadcastEvmTransaction(
  deps: Pick<Deps, 'chains'>,
  network: NetworkName,
  signed: { hash: string; raw: string },
): Promise<Rebroadcast> {
  const clients = clientsOf(deps, network);
  if (!clients || keccak256(signed.raw as Hex) !== signed.hash) return 'failed';
  if (await knownToNode(clients, signed.hash)) return 'known';
  try {
    await clients.publicClient.sendRawTransaction({ serializedTransaction: signed.raw as Hex });
    return 'sent';
  } catch (error) {
    const refusal = nonceRefusalOf(error);
    if (refusal === 'already_known') return 'known';
    return refusal ?? 'failed';
  }
}

/**
 * What became of one of our signed transactions that is not mined and whose nonce a node refused
 * (nonce_taken): 'dead' when the sender's mined transactions already count past its nonce and it
 * has no receipt (another transaction of that nonce was mined: it can never be), 'mined' when its
 * receipt appeared meanwhile, 'open' otherwise (the nonce is only taken in a mempool, or a read
 * failed). The count is read before the receipt, so a transaction mined in between is never
 * called dead.
 */
export async function lostTransactionFate(
  deps: Pick<Deps, 'chains'>,
  network: NetworkName,
  signed: { hash: string; raw: string },
): Promise<'dead' | 'mined' | 'open'> {
  const clients = clientsOf(deps, network);
  const sender = clients?.walletClient?.account.address;
  if (!clients || !sender) return 'open';
  let nonce: number | undefined;
  try {
    nonce = parseTransaction(signed.raw as Hex).nonce;
  } catch {
    return 'open';
  }
  if (nonce === undefined) return 'open';
  try {
    const mined = await clients.publicClient.getTransactionCount({ address: sender, blockTag: 'latest' });
    if (mined <= nonce) return 'open';
  } catch {
    return 'open';
  }
  const receipt = await readReceipt(deps, network, signed.hash as Hash);
  if (!receipt.ok) return 'open';
  return receipt.value.status === 'pending' ? 'dead' : 'mined';
}

export type ReceiptOutcome =
  | { status: 'success'; blockNumber: bigint; logs: readonly { address: Address; topics: readonly Hex[]; data: Hex }[] }
  | { status: 'reverted' }
  | { status: 'pending' };

/** Waits at most `timeoutMs` for the receipt; anything short of a receipt is pending, never failed. */
export async function waitForReceipt(
  deps: Pick<Deps, 'chains'>,
  network: NetworkName,
  hash: Hash,
  { timeoutMs, pollMs }: { timeoutMs: number; pollMs: number },
): Promise<ReceiptOutcome> {
  const clients = clientsOf(deps, network);
  if (!clients) return { status: 'pending' };
  try {
    const receipt = await clients.publicClient.waitForTransactionReceipt({
      hash,
      timeout: timeoutMs,
      pollingInterval: pollMs,
      retryCount: 0,
    });
    return receipt.status === 'success'
      ? { status: 'success', blockNumber: receipt.blockNumber, logs: receipt.logs }
      : { status: 'reverted' };
  } catch {
    // A timeout, an unreachable node, or a transaction the node does not know yet: all are "not yet".
    return { status: 'pending' };
  }
}

/** The receipt if the chain has one: reconciliation reads it once instead of waiting. */
export async function readReceipt(
  deps: Pick<Deps, 'chains'>,
  network: NetworkName,
  hash: Hash,
): Promise<Result<ReceiptOutcome, 'rpc_unavailable'>> {
  const clients = clientsOf(deps, network);
  if (!clients) return fail('rpc_unavailable', `${network} is not an enabled EVM network`);
  try {
    const receipt = await clients.publicClient.getTransactionReceipt({ hash });
    return ok(
      receipt.status === 'success'
        ? { status: 'success', blockNumber: receipt.blockNumber, logs: receipt.logs }
        : { status: 'reverted' },
    );
  } catch (error) {
    if (error instanceof TransactionReceiptNotFoundError) return ok({ status: 'pending' });
    return fail('rpc_unavailable', error instanceof BaseError ? error.shortMessage : String(error));
  }
}

/** Whether a successful receipt carries USDC's AuthorizationUsed event for this authorizer and nonce. */
export function receiptUsesAuthorization(
  logs: readonly { address: Address; topics: readonly Hex[]; data: Hex }[],
  usdc: Address,
  authorization: Pick<CheckedAuthorization, 'from' | 'nonce'>,
): boolean {
  return logsShowAuthorizationUse(logs, usdc, { authorizer: authorization.from, nonce: authorization.nonce });
}
