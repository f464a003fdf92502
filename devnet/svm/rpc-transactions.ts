// The transaction methods of the local Solana endpoint: simulateTransaction, sendTransaction,
// getTransaction and getSignaturesForAddress, with the errors a node gives for each.
import {
  getBase58Encoder,
  getBase64Decoder,
  getBase64Encoder,
  getCompiledTransactionMessageDecoder,
  getCompiledTransactionMessageEncoder,
  getTransactionDecoder,
  type Address,
  type Transaction,
} from '@solana/kit';
import type { ExecutedTransaction, SolanaLedger, TokenBalance } from './ledger.js';
import { signatureOf } from './transaction-facts.js';
import { encodeAccount, uiTokenAmount } from './rpc-accounts.js';
import {
  INVALID_PARAMS,
  PREFLIGHT_FAILURE,
  RpcError,
  SIGNATURE_VERIFICATION_FAILURE,
  UNSUPPORTED_TRANSACTION_VERSION,
  unsupportedEncoding,
  type Config,
} from './rpc-error.js';

function decodeWireTransaction(wire: string, encoding: unknown): Transaction {
  if (encoding !== undefined && encoding !== 'base64' && encoding !== 'base58') {
    throw unsupportedEncoding(encoding);
  }
  const bytes = encoding === 'base64' ? getBase64Encoder().encode(wire) : getBase58Encoder().encode(wire);
  try {
    return getTransactionDecoder().decode(bytes);
  } catch (error) {
    throw new RpcError(INVALID_PARAMS, `invalid transaction: ${(error as Error).message}`);
  }
}

function hasEverySignature(transaction: Transaction): boolean {
  return Object.values(transaction.signatures).every((signature) => signature !== null);
}

function withLatestBlockhash(ledger: SolanaLedger, transaction: Transaction): Transaction {
  const message = getCompiledTransactionMessageDecoder().decode(transaction.messageBytes);
  const messageBytes = getCompiledTransactionMessageEncoder().encode({
    ...message,
    lifetimeToken: ledger.latestBlockhash(),
  });
  return { ...transaction, messageBytes: messageBytes as Transaction['messageBytes'] };
}

export function simulateTransaction(ledger: SolanaLedger, wire: string, config: Config) {
  const verifySignatures = config.sigVerify === true;
  const replaceBlockhash = config.replaceRecentBlockhash === true;
  if (verifySignatures && replaceBlockhash) {
    throw new RpcError(INVALID_PARAMS, 'Invalid params: sigVerify may not be used with replaceRecentBlockhash');
  }
  let transaction = decodeWireTransaction(wire, config.encoding);
  if (replaceBlockhash) transaction = withLatestBlockhash(ledger, transaction);
  if (verifySignatures && !hasEverySignature(transaction)) {
    return {
      context: { slot: ledger.slot },
      value: simulationValue({ err: 'SignatureFailure', logs: [], unitsConsumed: 0n }),
    };
  }
  const outcome = ledger.simulate(transaction, { verifySignatures });
  const requested = config.accounts as { addresses?: Address[]; encoding?: string } | undefined;
  const accounts = requested?.addresses?.map((address) => {
    const account =
      outcome.err === null ? outcome.postAccounts.find((candidate) => candidate.address === address) : undefined;
    return account ? encodeAccount(ledger, account, { encoding: requested.encoding ?? 'base64' }) : null;
  });
  return {
    context: { slot: ledger.slot },
    value: {
      ...simulationValue(outcome),
      accounts: accounts ?? null,
      returnData: outcome.returnData
        ? {
            programId: outcome.returnData.programId,
            data: [getBase64Decoder().decode(outcome.returnData.data), 'base64'],
          }
        : null,
      replacementBlockhash: replaceBlockhash ? ledger.latestBlockhashLifetime() : undefined,
    },
  };
}

function simulationValue(outcome: { err: unknown; logs: string[]; unitsConsumed: bigint }) {
  return {
    err: outcome.err,
    logs: outcome.logs,
    accounts: null,
    unitsConsumed: outcome.unitsConsumed,
    returnData: null,
    innerInstructions: null,
  };
}

export function sendTransaction(ledger: SolanaLedger, wire: string, config: Config): string {
  const transaction = decodeWireTransaction(wire, config.encoding);
  if (!hasEverySignature(transaction)) {
    throw new RpcError(SIGNATURE_VERIFICATION_FAILURE, 'Transaction signature verification failure');
  }
  if (config.skipPreflight !== true) {
    const preflight = ledger.simulate(transaction, { verifySignatures: true });
    if (preflight.err !== null) {
      throw new RpcError(PREFLIGHT_FAILURE, `Transaction simulation failed: ${describeError(preflight.err)}`, {
        ...simulationValue(preflight),
      });
    }
  }
  const outcome = ledger.execute(transaction);
  if (!outcome.executed) {
    throw new RpcError(PREFLIGHT_FAILURE, `Transaction simulation failed: ${describeError(outcome.err)}`, {
      ...simulationValue({ err: outcome.err, logs: outcome.logs, unitsConsumed: 0n }),
    });
  }
  return signatureOf(transaction);
}

function describeError(err: unknown): string {
  if (err === 'AlreadyProcessed') return 'This transaction has already been processed';
  if (err === 'BlockhashNotFound') return 'Blockhash not found';
  return typeof err === 'string' ? err : JSON.stringify(err);
}

export function transactionInfo(ledger: SolanaLedger, signature: string, config: Config) {
  const executed: ExecutedTransaction | undefined = ledger.executedTransaction(signature);
  if (!executed) return null;
  if (executed.version !== 'legacy' && config.maxSupportedTransactionVersion === undefined) {
    throw new RpcError(
      UNSUPPORTED_TRANSACTION_VERSION,
      `Transaction version (${executed.version}) is not supported by the requesting client. Please try the request again with the following configuration parameter: "maxSupportedTransactionVersion": 0`,
    );
  }
  if (config.encoding !== 'base64') {
    throw new RpcError(
      INVALID_PARAMS,
      'Invalid params: the local node answers getTransaction with encoding base64 only',
    );
  }
  const tokenBalance = (balance: TokenBalance) => ({
    accountIndex: balance.accountIndex,
    mint: balance.mint,
    owner: balance.owner,
    programId: balance.programId,
    uiTokenAmount: uiTokenAmount(balance.amount, balance.decimals),
  });
  return {
    slot: executed.slot,
    blockTime: executed.blockTime,
    version: executed.version,
    transaction: [executed.wireTransactionBase64, 'base64'],
    meta: {
      err: executed.err,
      status: executed.err === null ? { Ok: null } : { Err: executed.err },
      fee: executed.fee,
      preBalances: executed.preBalances,
      postBalances: executed.postBalances,
      preTokenBalances: executed.preTokenBalances.map(tokenBalance),
      postTokenBalances: executed.postTokenBalances.map(tokenBalance),
      logMessages: executed.logs,
      computeUnitsConsumed: executed.computeUnitsConsumed,
      innerInstructions: [],
      loadedAddresses: { writable: [], readonly: [] },
      rewards: [],
    },
  };
}

/** getSignaturesForAddress returns at most this many signatures per request, as a node does. */
const MAX_SIGNATURES_PER_REQUEST = 1000;

/**
 * getSignaturesForAddress: the signatures of the executed transactions whose accounts include
 * `address`, newest first, starting before `before` and stopping at `until` (both exclusive), at
 * most `limit` (1 to 1000, default 1000), each with its slot, error, block time and commitment.
 */
export function signaturesForAddress(ledger: SolanaLedger, address: string, config: Config) {
  const limit = config.limit ?? MAX_SIGNATURES_PER_REQUEST;
  if (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1 || limit > MAX_SIGNATURES_PER_REQUEST)
    throw new RpcError(INVALID_PARAMS, 'Invalid limit; max 1000');
  for (const bound of [config.before, config.until])
    if (bound !== undefined && typeof bound !== 'string')
      throw new RpcError(INVALID_PARAMS, 'Invalid param: signature');
  let transactions = ledger.executedNewestFirst();
  if (typeof config.before === 'string') {
    const start = transactions.findIndex((executed) => executed.signature === config.before);
    transactions = start === -1 ? [] : transactions.slice(start + 1);
  }
  const found = [];
  for (const executed of transactions) {
    if (executed.signature === config.until || found.length >= limit) break;
    const transaction = getTransactionDecoder().decode(getBase64Encoder().encode(executed.wireTransactionBase64));
    const { staticAccounts } = getCompiledTransactionMessageDecoder().decode(transaction.messageBytes);
    if (!staticAccounts.includes(address as Address)) continue;
    found.push({
      signature: executed.signature,
      slot: executed.slot,
      err: executed.err,
      memo: null,
      blockTime: executed.blockTime,
      confirmationStatus: ledger.commitmentOf(executed),
    });
  }
  return found;
}
