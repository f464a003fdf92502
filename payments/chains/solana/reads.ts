/** What we read from a Solana cluster: balances, signature statuses, confirmed transactions (by signature or by a signer's signature among an account's), the block height. */
import {
  fetchEncodedAccounts,
  getBase58Decoder,
  getBase64Encoder,
  getTransactionDecoder,
  isAddress,
  isSignature,
  type Signature,
} from '@solana/kit';
import { fail, ok, type Result } from '../../basics/result';
import type { NetworkName } from '../../basics/networkTable';
import { readTokenAccount, rpcFailure, type ReadFailureReason, type SvmRpc } from './rpc';
import { usdcAccountOf } from './transactions';

export const DEFAULT_CONFIRMATION_TIMEOUT_MS = 30_000;
export const DEFAULT_CONFIRMATION_POLL_MS = 400;

/** not_found: the cluster does not know the signature (yet, or any more). */
export type SignatureStatus =
  | { kind: 'not_found' }
  | {
      kind: 'found';
      slot: bigint;
      confirmationStatus: 'processed' | 'confirmed' | 'finalized' | null;
      failed: boolean;
      err: unknown;
    };

export type TransactionSignatures =
  { kind: 'not_found' } | { kind: 'found'; failed: boolean; signatures: Record<string, string | null> };

export type SignedTransactionSearch =
  { kind: 'found'; transaction: string } | { kind: 'not_found' } | { kind: 'incomplete' };

/** getSignaturesForAddress answers at most this many signatures a request. */
export const SIGNATURES_PER_PAGE = 1000;

export interface SvmReads {
  usdcBalance(network: NetworkName, owner: string): Promise<Result<bigint, ReadFailureReason>>;
  /** The owner's SOL, which pays fees (lamports, confirmed). */
  gasBalance(network: NetworkName, owner: string): Promise<Result<bigint, ReadFailureReason>>;
  /** Whether the owner's associated USDC account exists (confirmed); its address is in `account`. */
  usdcAccountOf(
    network: NetworkName,
    owner: string,
  ): Promise<Result<{ account: string; exists: boolean }, ReadFailureReason>>;
  signatureStatus(network: NetworkName, signature: string): Promise<Result<SignatureStatus, ReadFailureReason>>;
  /**
   * A confirmed transaction's signatures by signer (base58), and whether it failed: the proof that
   * a transaction a target names is the one we signed. Not found while unconfirmed or unknown.
   */
  transactionSignatures(
    network: NetworkName,
    signature: string,
  ): Promise<Result<TransactionSignatures, ReadFailureReason>>;
  /**
   * The confirmed transaction of `account` that carries `signature` by `signer`, among those that
   * landed at or after `landedSince` (unix seconds): how a transaction is found whose id (its fee
   * payer's signature) we never learned, from a signature of its payer we hold. The account's
   * signatures are read newest first (getSignaturesForAddress, a page at a time) back to
   * `landedSince`: not_found only once every one since then was looked at; `incomplete` when
   * `maxPages` pages did not reach back that far.
   */
  findTransactionSignedBy(
    network: NetworkName,
    query: { account: string; signer: string; signature: string; landedSince: bigint; maxPages: number },
  ): Promise<Result<SignedTransactionSearch, ReadFailureReason>>;
  /** The cluster's block height (confirmed): a transaction whose lastValidBlockHeight is below it can no longer land. */
  blockHeight(network: NetworkName): Promise<Result<bigint, ReadFailureReason>>;
  /** Polls until the signature is confirmed (or finalized) or the time is up; a timeout answers the last status seen. */
  waitForSignature(
    network: NetworkName,
    signature: string,
    options?: { timeoutMs?: number; pollMs?: number },
  ): Promise<Result<SignatureStatus, ReadFailureReason>>;
}

export function createSvmReads(rpc: SvmRpc): SvmReads {
  const clientsOf = (network: NetworkName) => rpc.clientsOf(network);
  const bounded = () => rpc.bounded();

  /** The owner's USDC token account on `network`, read at confirmed: its address, and its contents when it exists. */
  async function readUsdcAccount(network: NetworkName, owner: string) {
    const clients = clientsOf(network);
    if (!clients.ok) return clients;
    if (!isAddress(owner)) return fail('invalid_argument', `${owner} is not a Solana address`);
    try {
      const account = await usdcAccountOf(owner, clients.value.usdc);
      const [encoded] = await fetchEncodedAccounts<[string]>(clients.value.rpc, [account], {
        ...bounded(),
        commitment: 'confirmed',
      });
      return ok({ account, encoded });
    } catch (error) {
      return rpcFailure(error);
    }
  }

  async function usdcBalance(network: NetworkName, owner: string): Promise<Result<bigint, ReadFailureReason>> {
    const read = await readUsdcAccount(network, owner);
    if (!read.ok) return read;
    const { encoded } = read.value;
    return ok(encoded.exists ? (readTokenAccount(encoded)?.amount ?? 0n) : 0n);
  }

  async function gasBalance(network: NetworkName, owner: string): Promise<Result<bigint, ReadFailureReason>> {
    const clients = clientsOf(network);
    if (!clients.ok) return clients;
    if (!isAddress(owner)) return fail('invalid_argument', `${owner} is not a Solana address`);
    try {
      const { value } = await clients.value.rpc.getBalance(owner, { commitment: 'confirmed' }).send(bounded());
      return ok(value);
    } catch (error) {
      return rpcFailure(error);
    }
  }

  async function usdcAccountOfOwner(
    network: NetworkName,
    owner: string,
  ): Promise<Result<{ account: string; exists: boolean }, ReadFailureReason>> {
    const read = await readUsdcAccount(network, owner);
    if (!read.ok) return read;
    return ok({ account: read.value.account, exists: read.value.encoded.exists });
  }

  async function signatureStatus(
    network: NetworkName,
    signature: string,
  ): Promise<Result<SignatureStatus, ReadFailureReason>> {
    const clients = clientsOf(network);
    if (!clients.ok) return clients;
    if (!isSignature(signature)) return fail('invalid_argument', 'not a transaction signature');
    try {
      const { value } = await clients.value.rpc
        .getSignatureStatuses([signature], { searchTransactionHistory: true })
        .send(bounded());
      const status = value[0];
      if (!status) return ok({ kind: 'not_found' });
      return ok({
        kind: 'found',
        slot: status.slot,
        confirmationStatus: status.confirmationStatus,
        failed: status.err !== null,
        err: status.err,
      });
    } catch (error) {
      return rpcFailure(error);
    }
  }

  async function transactionSignatures(
    network: NetworkName,
    signature: string,
  ): Promise<Result<TransactionSignatures, ReadFailureReason>> {
    const clients = clientsOf(network);
    if (!clients.ok) return clients;
    if (!isSignature(signature)) return fail('invalid_argument', 'not a transaction signature');
    try {
      const found = await clients.value.rpc
        .getTransaction(signature, {
          encoding: 'base64',
          maxSupportedTransactionVersion: 0,
          commitment: 'confirmed',
        })
        .send(bounded());
      if (!found) return ok({ kind: 'not_found' });
      const wire = getBase64Encoder().encode(found.transaction[0]);
      const transaction = getTransactionDecoder().decode(wire);
      const decoder = getBase58Decoder();
      const signatures: Record<string, string | null> = {};
      for (const [address, bytes] of Object.entries(transaction.signatures))
        signatures[address] = bytes ? decoder.decode(bytes) : null;
      return ok({ kind: 'found', failed: found.meta?.err != null, signatures });
    } catch (error) {
      return rpcFailure(error);
    }
  }

  async function findTransactionSignedBy(
    network: NetworkName,
    query: { account: string; signer: string; signature: string; landedSince: bigint; maxPages: number },
  ): Promise<Result<SignedTransactionSearch, ReadFailureReason>> {
    const clients = clientsOf(network);
    if (!clients.ok) return clients;
    if (!isAddress(query.account)) return fail('invalid_argument', `${query.account} is not a Solana address`);
    let before: Signature | undefined;
    for (let page = 0; page < query.maxPages; page++) {
      let entries: readonly { signature: Signature; blockTime: bigint | null }[];
      try {
        entries = await clients.value.rpc
          .getSignaturesForAddress(query.account, {
            limit: SIGNATURES_PER_PAGE,
            commitment: 'confirmed',
            ...(before === undefined ? {} : { before }),
          })
          .send(bounded());
      } catch (error) {
        return rpcFailure(error);
      }
      for (const entry of entries) {
        // Newest first: one that landed before the payment was handed on ends the search.
        if (entry.blockTime !== null && entry.blockTime < query.landedSince) return ok({ kind: 'not_found' });
        const found = await transactionSignatures(network, entry.signature);
        if (!found.ok) return found;
        if (found.value.kind === 'found' && found.value.signatures[query.signer] === query.signature)
          return ok({ kind: 'found', transaction: entry.signature });
      }
      if (entries.length < SIGNATURES_PER_PAGE) return ok({ kind: 'not_found' });
      before = entries.at(-1)?.signature;
    }
    return ok({ kind: 'incomplete' });
  }

  async function blockHeight(network: NetworkName): Promise<Result<bigint, ReadFailureReason>> {
    const clients = clientsOf(network);
    if (!clients.ok) return clients;
    try {
      return ok(await clients.value.rpc.getBlockHeight({ commitment: 'confirmed' }).send(bounded()));
    } catch (error) {
      return rpcFailure(error);
    }
  }

  async function waitForSignature(
    network: NetworkName,
    signature: string,
    {
      timeoutMs = DEFAULT_CONFIRMATION_TIMEOUT_MS,
      pollMs = DEFAULT_CONFIRMATION_POLL_MS,
    }: { timeoutMs?: number; pollMs?: number } = {},
  ): Promise<Result<SignatureStatus, ReadFailureReason>> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const status = await signatureStatus(network, signature);
      if (!status.ok) return status;
      const settled =
        status.value.kind === 'found' &&
        (status.value.confirmationStatus === 'confirmed' || status.value.confirmationStatus === 'finalized');
      if (settled || Date.now() + pollMs > deadline) return status;
      await new Promise((resolve) => setTimeout(resolve, pollMs));
    }
  }

  return {
    usdcBalance,
    gasBalance,
    usdcAccountOf: usdcAccountOfOwner,
    signatureStatus,
    transactionSignatures,
    findTransactionSignedBy,
    blockHeight,
    waitForSignature,
  };
}
