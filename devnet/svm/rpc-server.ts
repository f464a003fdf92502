// A Solana JSON-RPC endpoint on 127.0.0.1 in front of one litesvm ledger, so that code under test
// talks to it exactly as to a node (an unmodified createSolanaRpc from @solana/kit works). It
// answers the methods payment flows use, in the shapes a node gives; anything else is "Method not
// found" rather than a guess. No websocket: confirm by polling getSignatureStatuses.
//
// Where it differs from a node: litesvm has one blockhash that never expires (so a transaction is
// never dropped for an old blockhash); each executed transaction is its own slot and is final at
// once; a transaction refused before execution (bad signature, unknown blockhash, duplicate) is an
// error of sendTransaction even with skipPreflight, where a node would drop it silently.
import { createServer, type IncomingMessage, type Server } from 'node:http';
import {
  getBase58Decoder,
  getBase58Encoder,
  getBase64Decoder,
  getBase64Encoder,
  getCompiledTransactionMessageDecoder,
  getCompiledTransactionMessageEncoder,
  getTransactionDecoder,
  type Address,
  type EncodedAccount,
  type Transaction,
} from '@solana/kit';
import { getMintDecoder, getMintSize, getTokenDecoder, getTokenSize, TOKEN_PROGRAM_ADDRESS } from '@solana-program/token';
import type { SolanaNetworkName } from '../networks.js';
import { feeOfMessage, signatureOf, type ExecutedTransaction, type SolanaLedger, type TokenBalance } from './ledger.js';

const MAX_REQUEST_BYTES = 1024 * 1024;
const BLOCKHASH_VALIDITY_BLOCKS = 150n;
const RENT_EPOCH_EXEMPT = 18_446_744_073_709_551_615n;

const GENESIS_HASHES: Record<SolanaNetworkName, string> = {
  solana: '5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d',
  'solana-devnet': 'EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG',
};

// JSON-RPC and Solana error codes as a node returns them.
const INVALID_REQUEST = -32600;
const METHOD_NOT_FOUND = -32601;
const INVALID_PARAMS = -32602;
const PARSE_ERROR = -32700;
const PREFLIGHT_FAILURE = -32002;
const SIGNATURE_VERIFICATION_FAILURE = -32003;
const UNSUPPORTED_TRANSACTION_VERSION = -32015;

class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
  }
}

type Params = unknown[];
type Config = Record<string, unknown>;

export interface SolanaRpcServer {
  url: string;
  /** How many JSON-RPC calls were answered, by method. */
  callCounts: Map<string, number>;
  close(): Promise<void>;
}

export async function startSolanaRpcServer(ledger: SolanaLedger): Promise<SolanaRpcServer> {
  const methods = rpcMethods(ledger);
  const callCounts = new Map<string, number>();

  async function answer(call: unknown): Promise<unknown> {
    const request = call as { jsonrpc?: string; id?: unknown; method?: unknown; params?: unknown };
    const id = request?.id ?? null;
    try {
      if (typeof request !== 'object' || request === null || typeof request.method !== 'string') {
        throw new RpcError(INVALID_REQUEST, 'Invalid request');
      }
      const method = methods[request.method];
      if (!method) throw new RpcError(METHOD_NOT_FOUND, 'Method not found');
      callCounts.set(request.method, (callCounts.get(request.method) ?? 0) + 1);
      const params = Array.isArray(request.params) ? request.params : [];
      return { jsonrpc: '2.0', result: await method(params), id };
    } catch (error) {
      const rpcError = error instanceof RpcError ? error : new RpcError(INVALID_PARAMS, `Invalid params: ${(error as Error).message}`);
      return { jsonrpc: '2.0', error: { code: rpcError.code, message: rpcError.message, data: rpcError.data }, id };
    }
  }

  const server: Server = createServer(async (request, response) => {
    let body: unknown;
    try {
      body = JSON.parse(await readBody(request));
    } catch {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(stringify({ jsonrpc: '2.0', error: { code: PARSE_ERROR, message: 'Parse error' }, id: null }));
      return;
    }
    const result = Array.isArray(body) ? await Promise.all(body.map(answer)) : await answer(body);
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(stringify(result));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    callCounts,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function rpcMethods(ledger: SolanaLedger): Record<string, (params: Params) => unknown> {
  const context = () => ({ slot: ledger.slot });
  const withContext = (value: unknown) => ({ context: context(), value });

  return {
    getHealth: () => 'ok',
    getGenesisHash: () => GENESIS_HASHES[ledger.network],
    getSlot: () => ledger.slot,
    getBlockHeight: () => ledger.slot,
    getLatestBlockhash: () =>
      withContext({ blockhash: ledger.latestBlockhash(), lastValidBlockHeight: ledger.slot + BLOCKHASH_VALIDITY_BLOCKS }),
    isBlockhashValid: ([blockhash]) => withContext(blockhash === ledger.latestBlockhash()),
    getBalance: ([address]) => withContext(ledger.lamports(address as Address)),
    getMinimumBalanceForRentExemption: ([size]) => ledger.svm.minimumBalanceForRentExemption(BigInt(size as number)),
    getFeeForMessage: ([message]) => withContext(feeOfMessage(getBase64Encoder().encode(message as string) as Uint8Array)),
    getAccountInfo: ([address, config]) => withContext(accountInfo(ledger, address as Address, config as Config | undefined)),
    getMultipleAccounts: ([addresses, config]) =>
      withContext((addresses as Address[]).map((address) => accountInfo(ledger, address, config as Config | undefined))),
    getTokenAccountBalance: ([address]) => {
      const account = ledger.svm.getAccount(address as Address);
      if (!account.exists || account.programAddress !== TOKEN_PROGRAM_ADDRESS || account.data.length !== getTokenSize()) {
        throw new RpcError(INVALID_PARAMS, 'Invalid param: not a Token account');
      }
      const token = getTokenDecoder().decode(account.data);
      return withContext(uiTokenAmount(token.amount, ledger.decimalsOf(token.mint)));
    },
    getTokenAccountsByOwner: ([owner, filter, config]) => {
      const { mint, programId } = (filter ?? {}) as { mint?: Address; programId?: Address };
      if (programId !== undefined && programId !== TOKEN_PROGRAM_ADDRESS) return withContext([]);
      const accounts = ledger.svm
        .getProgramAccounts(TOKEN_PROGRAM_ADDRESS)
        .filter((account) => account.data.length === getTokenSize())
        .filter((account) => {
          const token = getTokenDecoder().decode(account.data);
          return token.owner === owner && (mint === undefined || token.mint === mint);
        });
      return withContext(
        accounts.map((account) => ({ pubkey: account.address, account: encodeAccount(ledger, account, config as Config | undefined) })),
      );
    },
    simulateTransaction: ([wire, config]) => simulateTransaction(ledger, wire as string, (config ?? {}) as Config),
    sendTransaction: ([wire, config]) => sendTransaction(ledger, wire as string, (config ?? {}) as Config),
    getSignatureStatuses: ([signatures]) =>
      withContext(
        (signatures as string[]).map((signature) => {
          const executed = ledger.executedTransaction(signature);
          if (!executed) return null;
          return {
            slot: executed.slot,
            confirmations: null,
            err: executed.err,
            status: executed.err === null ? { Ok: null } : { Err: executed.err },
            confirmationStatus: 'finalized',
          };
        }),
      ),
    getTransaction: ([signature, config]) => transactionInfo(ledger, signature as string, (config ?? {}) as Config),
  };
}

function decodeWireTransaction(wire: string, encoding: unknown): Transaction {
  if (encoding !== undefined && encoding !== 'base64' && encoding !== 'base58') {
    throw new RpcError(INVALID_PARAMS, `Invalid params: unsupported encoding ${String(encoding)}`);
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
  const messageBytes = getCompiledTransactionMessageEncoder().encode({ ...message, lifetimeToken: ledger.latestBlockhash() });
  return { ...transaction, messageBytes: messageBytes as Transaction['messageBytes'] };
}

function simulateTransaction(ledger: SolanaLedger, wire: string, config: Config) {
  const verifySignatures = config.sigVerify === true;
  const replaceBlockhash = config.replaceRecentBlockhash === true;
  if (verifySignatures && replaceBlockhash) {
    throw new RpcError(INVALID_PARAMS, 'Invalid params: sigVerify may not be used with replaceRecentBlockhash');
  }
  let transaction = decodeWireTransaction(wire, config.encoding);
  if (replaceBlockhash) transaction = withLatestBlockhash(ledger, transaction);
  if (verifySignatures && !hasEverySignature(transaction)) {
    return { context: { slot: ledger.slot }, value: simulationValue({ err: 'SignatureFailure', logs: [], unitsConsumed: 0n }) };
  }
  const outcome = ledger.simulate(transaction, { verifySignatures });
  const requested = config.accounts as { addresses?: Address[]; encoding?: string } | undefined;
  const accounts = requested?.addresses?.map((address) => {
    const account = outcome.err === null ? outcome.postAccounts.find((candidate) => candidate.address === address) : undefined;
    return account ? encodeAccount(ledger, account, { encoding: requested.encoding ?? 'base64' }) : null;
  });
  return {
    context: { slot: ledger.slot },
    value: {
      ...simulationValue(outcome),
      accounts: accounts ?? null,
      returnData: outcome.returnData
        ? { programId: outcome.returnData.programId, data: [getBase64Decoder().decode(outcome.returnData.data), 'base64'] }
        : null,
      replacementBlockhash: replaceBlockhash
        ? { blockhash: ledger.latestBlockhash(), lastValidBlockHeight: ledger.slot + BLOCKHASH_VALIDITY_BLOCKS }
        : undefined,
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

function sendTransaction(ledger: SolanaLedger, wire: string, config: Config): string {
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

function transactionInfo(ledger: SolanaLedger, signature: string, config: Config) {
  const executed: ExecutedTransaction | undefined = ledger.executedTransaction(signature);
  if (!executed) return null;
  if (executed.version !== 'legacy' && config.maxSupportedTransactionVersion === undefined) {
    throw new RpcError(
      UNSUPPORTED_TRANSACTION_VERSION,
      `Transaction version (${executed.version}) is not supported by the requesting client. Please try the request again with the following configuration parameter: "maxSupportedTransactionVersion": 0`,
    );
  }
  if (config.encoding !== 'base64') {
    throw new RpcError(INVALID_PARAMS, 'Invalid params: the local node answers getTransaction with encoding base64 only');
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

function accountInfo(ledger: SolanaLedger, address: Address, config: Config | undefined) {
  const account = ledger.svm.getAccount(address);
  return account.exists ? encodeAccount(ledger, account, config) : null;
}

function encodeAccount(ledger: SolanaLedger, account: EncodedAccount, config: Config | undefined) {
  const encoding = config?.encoding ?? 'base58';
  return {
    data: encodeAccountData(ledger, account, encoding),
    executable: account.executable,
    lamports: account.lamports,
    owner: account.programAddress,
    rentEpoch: RENT_EPOCH_EXEMPT,
    space: BigInt(account.data.length),
  };
}

function encodeAccountData(ledger: SolanaLedger, account: EncodedAccount, encoding: unknown): unknown {
  if (encoding === 'jsonParsed') {
    const parsed = parseTokenProgramAccount(ledger, account);
    if (parsed) return parsed;
    return [getBase64Decoder().decode(account.data), 'base64'];
  }
  if (encoding === 'base64') return [getBase64Decoder().decode(account.data), 'base64'];
  if (encoding === 'base58') return [getBase58Decoder().decode(account.data), 'base58'];
  throw new RpcError(INVALID_PARAMS, `Invalid params: unsupported encoding ${String(encoding)}`);
}

/** The jsonParsed form of SPL token accounts and mints; other accounts fall back to base64 as on a node. */
function parseTokenProgramAccount(ledger: SolanaLedger, account: EncodedAccount): unknown {
  if (account.programAddress !== TOKEN_PROGRAM_ADDRESS) return undefined;
  const space = account.data.length;
  if (space === getTokenSize()) {
    const token = getTokenDecoder().decode(account.data);
    return {
      program: 'spl-token',
      space,
      parsed: {
        type: 'account',
        info: {
          isNative: token.isNative.__option === 'Some',
          mint: token.mint,
          owner: token.owner,
          state: ['uninitialized', 'initialized', 'frozen'][token.state],
          tokenAmount: uiTokenAmount(token.amount, ledger.decimalsOf(token.mint)),
        },
      },
    };
  }
  if (space === getMintSize()) {
    const mint = getMintDecoder().decode(account.data);
    return {
      program: 'spl-token',
      space,
      parsed: {
        type: 'mint',
        info: {
          decimals: mint.decimals,
          freezeAuthority: mint.freezeAuthority.__option === 'Some' ? mint.freezeAuthority.value : null,
          isInitialized: mint.isInitialized,
          mintAuthority: mint.mintAuthority.__option === 'Some' ? mint.mintAuthority.value : null,
          supply: mint.supply.toString(),
        },
      },
    };
  }
  return undefined;
}

function uiTokenAmount(amount: bigint, decimals: number) {
  const digits = amount.toString().padStart(decimals + 1, '0');
  const whole = digits.slice(0, digits.length - decimals);
  const fraction = digits.slice(digits.length - decimals).replace(/0+$/, '');
  const uiAmountString = fraction ? `${whole}.${fraction}` : whole;
  // uiAmount is a float in a node's answer too; nothing in the harness reads it.
  return { amount: amount.toString(), decimals, uiAmount: Number(uiAmountString), uiAmountString };
}

async function readBody(request: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request) {
    size += (chunk as Buffer).length;
    if (size > MAX_REQUEST_BYTES) throw new Error('request too large');
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** JSON with u64 values as bare numbers, as a node writes them (kit reads every number as a bigint). */
function stringify(value: unknown): string {
  return JSON.stringify(value, (_key, item) => (typeof item === 'bigint' ? `__u64__${item}` : item)).replace(
    /"__u64__(\d+)"/g,
    '$1',
  );
}

