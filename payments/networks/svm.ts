/**
 * The service wallet on Solana (@solana/kit): the signer from SOLANA_PRIVATE_KEY, per-network RPC
 * clients, and the x402 exact payment we send to targets (docs/architecture.md section 4): a v0 transaction
 * whose fee payer is the target's facilitator (extra.feePayer), with SetComputeUnitLimit,
 * SetComputeUnitPrice and one TransferChecked of exactly the amount from our USDC account to the
 * payTo's associated USDC account, signed by us only. The facilitator co-signs and submits.
 *
 * JSON-RPC over HTTP only, no websocket subscriptions: confirmation is learned by polling
 * getSignatureStatuses. Every request carries an abort signal with a timeout.
 */
import { randomInt } from 'node:crypto';
import {
  appendTransactionMessageInstructions,
  createKeyPairSignerFromBytes,
  createSolanaRpc,
  createTransactionMessage,
  fetchEncodedAccounts,
  getBase58Encoder,
  getBase64EncodedWireTransaction,
  getBase64Encoder,
  getTransactionDecoder,
  getBase58Decoder,
  isAddress,
  isSignature,
  partiallySignTransactionMessageWithSigners,
  pipe,
  setTransactionMessageFeePayer,
  setTransactionMessageLifetimeUsingBlockhash,
  type Address,
  type KeyPairSigner,
  type Signature,
  type Transaction,
} from '@solana/kit';
import { getSetComputeUnitLimitInstruction, getSetComputeUnitPriceInstruction } from '@solana-program/compute-budget';
import {
  AccountState,
  findAssociatedTokenPda,
  getTokenDecoder,
  getTokenSize,
  getTransferCheckedInstruction,
  TOKEN_PROGRAM_ADDRESS,
} from '@solana-program/token';
import { ConfigError, type Config } from '../config';
import { encodePaymentHeader } from '../x402/headers';
import { X402_VERSION, type ExactSvmPayload, type PaymentPayload, type PaymentRequirements } from '../x402/types';
import { fail, ok, type Result } from '../result';
import { canonicalNetwork, NETWORK_TABLE, type NetworkName } from '../networkTable';

export const DEFAULT_RPC_TIMEOUT_MS = 10_000;
export const USDC_DECIMALS = 6;
/**
 * A TransferChecked costs about 6,200 compute units on the classic token program, each compute
 * budget instruction 150: a limit with room to spare saves a simulation round trip.
 *
 * Two payments of the same amount to the same payTo under the same blockhash would be byte-identical
 * transactions (ed25519 signatures are deterministic), and the cluster keeps only the first: the
 * second call would fail. A Memo would make them unique, but x402 1.2.0's facilitator refuses any
 * fourth instruction, so the limit and the price are drawn at random within these bounds instead.
 * The priority fee stays at most 5 x 200,000 / 10^6 = 1 lamport; facilitators cap the price at
 * 5,000,000 micro-lamports.
 */
export const COMPUTE_UNIT_LIMIT_RANGE = { min: 20_000, max: 200_000 } as const;
export const COMPUTE_UNIT_PRICE_MICRO_LAMPORTS_RANGE = { min: 1, max: 5 } as const;
export const DEFAULT_CONFIRMATION_TIMEOUT_MS = 30_000;
export const DEFAULT_CONFIRMATION_POLL_MS = 400;
const MAX_U64 = (1n << 64n) - 1n;

export type SolanaRpc = ReturnType<typeof createSolanaRpc>;

export type BuildFailureReason =
  | 'not_solana_network'
  | 'network_not_enabled'
  | 'no_wallet'
  | 'asset_mismatch'
  | 'invalid_requirements'
  | 'missing_fee_payer'
  | 'invalid_fee_payer'
  | 'destination_account_missing'
  | 'destination_account_invalid'
  | 'insufficient_funds'
  | 'rpc_timeout'
  | 'rpc_error';

export type ReadFailureReason = 'network_not_enabled' | 'invalid_argument' | 'rpc_timeout' | 'rpc_error';

export interface BuiltSolanaPayment {
  network: NetworkName;
  /** X-PAYMENT as an object; `header` is its encoding. */
  payment: PaymentPayload<ExactSvmPayload>;
  header: string;
  payer: Address;
  feePayer: Address;
  source: Address;
  destination: Address;
  amount: bigint;
  /** The transaction cannot land after this block height: a watch may give up past it. */
  lastValidBlockHeight: bigint;
  /** Our signature (base58). The transaction's id is the fee payer's signature, known once the facilitator signs. */
  payerSignature: string;
}

export type SignatureStatus =
  | { found: false }
  | { found: true; slot: bigint; confirmationStatus: 'processed' | 'confirmed' | 'finalized' | null; failed: boolean; err: unknown };

export interface SvmNetworkClients {
  network: NetworkName;
  usdc: Address;
  rpc: SolanaRpc;
}

export interface SvmChains {
  signer: KeyPairSigner | undefined;
  networks: ReadonlyMap<NetworkName, SvmNetworkClients>;
  buildExactPayment(requirements: PaymentRequirements): Promise<Result<BuiltSolanaPayment, BuildFailureReason>>;
  usdcBalance(network: NetworkName, owner: string): Promise<Result<bigint, ReadFailureReason>>;
  signatureStatus(network: NetworkName, signature: string): Promise<Result<SignatureStatus, ReadFailureReason>>;
  /**
   * A confirmed transaction's signatures by signer (base58), and whether it failed: the proof that
   * a transaction a target names is the one we signed. Not found while unconfirmed or unknown.
   */
  transactionSignatures(
    network: NetworkName,
    signature: string,
  ): Promise<Result<{ found: false } | { found: true; failed: boolean; signatures: Record<string, string | null> }, ReadFailureReason>>;
  /** The cluster's block height (confirmed): a transaction whose lastValidBlockHeight is below it can no longer land. */
  blockHeight(network: NetworkName): Promise<Result<bigint, ReadFailureReason>>;
  /** Polls until the signature is confirmed (or finalized) or the time is up; a timeout answers the last status seen. */
  waitForSignature(
    network: NetworkName,
    signature: string,
    options?: { timeoutMs?: number; pollMs?: number },
  ): Promise<Result<SignatureStatus, ReadFailureReason>>;
}

export interface SvmOptions {
  rpcTimeoutMs?: number;
}

/** SOLANA_PRIVATE_KEY: base58 of the 64-byte secret key, or its JSON byte array (as solana-keygen writes it). */
export function solanaSecretKeyBytes(key: string): Uint8Array {
  const text = key.trim();
  let bytes: Uint8Array;
  if (text.startsWith('[')) {
    let values: unknown;
    try {
      values = JSON.parse(text);
    } catch {
      throw new ConfigError('SOLANA_PRIVATE_KEY', 'not a JSON byte array');
    }
    if (!Array.isArray(values) || !values.every((value) => Number.isInteger(value) && value >= 0 && value <= 255)) {
      throw new ConfigError('SOLANA_PRIVATE_KEY', 'not a JSON byte array');
    }
    bytes = Uint8Array.from(values as number[]);
  } else {
    try {
      bytes = new Uint8Array(getBase58Encoder().encode(text));
    } catch {
      throw new ConfigError('SOLANA_PRIVATE_KEY', 'not base58');
    }
  }
  if (bytes.length !== 64) throw new ConfigError('SOLANA_PRIVATE_KEY', `expected a 64-byte secret key, got ${bytes.length} bytes`);
  return bytes;
}

export async function solanaSignerFromKey(key: string): Promise<KeyPairSigner> {
  const bytes = solanaSecretKeyBytes(key);
  try {
    return await createKeyPairSignerFromBytes(bytes);
  } catch {
    throw new ConfigError('SOLANA_PRIVATE_KEY', 'the public key half does not match the private key');
  }
}

export async function usdcAccountOf(owner: Address, mint: Address): Promise<Address> {
  const [address] = await findAssociatedTokenPda({ owner, mint, tokenProgram: TOKEN_PROGRAM_ADDRESS });
  return address;
}

/**
 * The exact-scheme transaction message (pure, no RPC): fee payer = the facilitator, then compute
 * unit limit, compute unit price, and one TransferChecked with us as the authority.
 */
export function exactPaymentMessage(input: {
  payer: KeyPairSigner;
  feePayer: Address;
  mint: Address;
  source: Address;
  destination: Address;
  amount: bigint;
  blockhash: { blockhash: Parameters<typeof setTransactionMessageLifetimeUsingBlockhash>[0]['blockhash']; lastValidBlockHeight: bigint };
  computeUnitLimit: number;
  computeUnitPriceMicroLamports: bigint;
}) {
  return pipe(
    createTransactionMessage({ version: 0 }),
    (message) => setTransactionMessageFeePayer(input.feePayer, message),
    (message) => setTransactionMessageLifetimeUsingBlockhash(input.blockhash, message),
    (message) =>
      appendTransactionMessageInstructions(
        [
          getSetComputeUnitLimitInstruction({ units: input.computeUnitLimit }),
          getSetComputeUnitPriceInstruction({ microLamports: input.computeUnitPriceMicroLamports }),
          getTransferCheckedInstruction({
            source: input.source,
            mint: input.mint,
            destination: input.destination,
            authority: input.payer,
            amount: input.amount,
            decimals: USDC_DECIMALS,
          }),
        ],
        message,
      ),
  );
}

function isTimeout(error: unknown): boolean {
  for (let cause = error, depth = 0; cause instanceof Error && depth < 8; cause = cause.cause, depth++) {
    if (cause.name === 'TimeoutError' || cause.name === 'AbortError') return true;
  }
  return false;
}

function rpcFailure(error: unknown): { ok: false; reason: 'rpc_timeout' | 'rpc_error'; details: string } {
  if (isTimeout(error)) return fail('rpc_timeout', 'the RPC endpoint did not answer in time');
  return fail('rpc_error', error instanceof Error ? error.message : String(error));
}

export async function createSvmChains(config: Pick<Config, 'networks' | 'solanaPrivateKey'>, options: SvmOptions = {}): Promise<SvmChains> {
  const timeoutMs = options.rpcTimeoutMs ?? DEFAULT_RPC_TIMEOUT_MS;
  const bounded = () => ({ abortSignal: AbortSignal.timeout(timeoutMs) });
  const signer = config.solanaPrivateKey === undefined ? undefined : await solanaSignerFromKey(config.solanaPrivateKey);
  const networks = new Map<NetworkName, SvmNetworkClients>();
  for (const settings of config.networks) {
    if (NETWORK_TABLE[settings.name].chainType !== 'solana') continue;
    networks.set(settings.name, { network: settings.name, usdc: settings.usdc as Address, rpc: createSolanaRpc(settings.rpcUrl) });
  }

  function clientsOf(network: NetworkName): Result<SvmNetworkClients, 'network_not_enabled'> {
    const clients = networks.get(network);
    return clients ? ok(clients) : fail('network_not_enabled', `${network} is not an enabled Solana network`);
  }

  async function buildExactPayment(requirements: PaymentRequirements): Promise<Result<BuiltSolanaPayment, BuildFailureReason>> {
    const network = canonicalNetwork(requirements.network);
    if (network === undefined || NETWORK_TABLE[network].chainType !== 'solana') {
      return fail('not_solana_network', `${requirements.network} is not a Solana network`);
    }
    const clients = clientsOf(network);
    if (!clients.ok) return clients;
    if (signer === undefined) return fail('no_wallet', 'SOLANA_PRIVATE_KEY is not configured');
    const { rpc, usdc } = clients.value;
    if (requirements.asset !== usdc) return fail('asset_mismatch', `asset ${requirements.asset} is not USDC on ${network}`);
    if (!isAddress(requirements.payTo)) return fail('invalid_requirements', `payTo ${requirements.payTo} is not a Solana address`);
    if (!/^[1-9][0-9]*$/.test(requirements.maxAmountRequired) || BigInt(requirements.maxAmountRequired) > MAX_U64) {
      return fail('invalid_requirements', 'maxAmountRequired is not a positive 64-bit integer');
    }
    const feePayer = requirements.extra?.feePayer;
    if (feePayer === undefined || feePayer === null || feePayer === '') return fail('missing_fee_payer', 'extra.feePayer is missing');
    if (typeof feePayer !== 'string' || !isAddress(feePayer)) return fail('invalid_fee_payer', 'extra.feePayer is not a Solana address');
    // Our key as fee payer would make us pay the fee and be both payer and authority, which facilitators refuse.
    if (feePayer === signer.address) return fail('invalid_fee_payer', 'extra.feePayer is our own address');

    const amount = BigInt(requirements.maxAmountRequired);
    const payTo = requirements.payTo as Address;
    const source = await usdcAccountOf(signer.address, usdc);
    const destination = await usdcAccountOf(payTo, usdc);

    let blockhash: { blockhash: Parameters<typeof setTransactionMessageLifetimeUsingBlockhash>[0]['blockhash']; lastValidBlockHeight: bigint };
    try {
      // One read at one slot for both accounts: the balance we check is the one next to the destination we saw.
      const [destinationAccount, sourceAccount] = await fetchEncodedAccounts(rpc, [destination, source], { ...bounded(), commitment: 'confirmed' });
      if (!destinationAccount.exists) {
        return fail('destination_account_missing', `the USDC account of ${payTo} on ${network} does not exist; we never pay into a missing account`);
      }
      const destinationToken = readTokenAccount(destinationAccount);
      if (destinationToken === undefined || destinationToken.mint !== usdc || destinationToken.owner !== payTo) {
        return fail('destination_account_invalid', `the account ${destination} is not a USDC account of ${payTo}`);
      }
      if (destinationToken.state !== AccountState.Initialized) {
        return fail('destination_account_invalid', `the USDC account of ${payTo} is frozen or uninitialized`);
      }
      const sourceToken = sourceAccount.exists ? readTokenAccount(sourceAccount) : undefined;
      const balance = sourceToken?.amount ?? 0n;
      if (balance < amount) return fail('insufficient_funds', `our USDC balance on ${network} is ${balance}, the payment needs ${amount}`);
      ({ value: blockhash } = await rpc.getLatestBlockhash({ commitment: 'confirmed' }).send(bounded()));
    } catch (error) {
      return rpcFailure(error);
    }

    const message = exactPaymentMessage({
      payer: signer,
      feePayer,
      mint: usdc,
      source,
      destination,
      amount,
      blockhash,
      computeUnitLimit: randomInt(COMPUTE_UNIT_LIMIT_RANGE.min, COMPUTE_UNIT_LIMIT_RANGE.max + 1),
      computeUnitPriceMicroLamports: BigInt(
        randomInt(COMPUTE_UNIT_PRICE_MICRO_LAMPORTS_RANGE.min, COMPUTE_UNIT_PRICE_MICRO_LAMPORTS_RANGE.max + 1),
      ),
    });
    const signed: Transaction = await partiallySignTransactionMessageWithSigners(message);
    const ourSignature = signed.signatures[signer.address];
    const payment: PaymentPayload<ExactSvmPayload> = {
      x402Version: X402_VERSION,
      scheme: 'exact',
      network: requirements.network,
      payload: { transaction: getBase64EncodedWireTransaction(signed) },
    };
    return ok({
      network,
      payment,
      header: encodePaymentHeader(payment),
      payer: signer.address,
      feePayer,
      source,
      destination,
      amount,
      lastValidBlockHeight: blockhash.lastValidBlockHeight,
      payerSignature: ourSignature ? getBase58Decoder().decode(ourSignature) : '',
    });
  }

  async function usdcBalance(network: NetworkName, owner: string): Promise<Result<bigint, ReadFailureReason>> {
    const clients = clientsOf(network);
    if (!clients.ok) return clients;
    if (!isAddress(owner)) return fail('invalid_argument', `${owner} is not a Solana address`);
    try {
      const account = await usdcAccountOf(owner, clients.value.usdc);
      const [encoded] = await fetchEncodedAccounts(clients.value.rpc, [account], { ...bounded(), commitment: 'confirmed' });
      return ok(encoded.exists ? (readTokenAccount(encoded)?.amount ?? 0n) : 0n);
    } catch (error) {
      return rpcFailure(error);
    }
  }

  async function signatureStatus(network: NetworkName, signature: string): Promise<Result<SignatureStatus, ReadFailureReason>> {
    const clients = clientsOf(network);
    if (!clients.ok) return clients;
    if (!isSignature(signature)) return fail('invalid_argument', 'not a transaction signature');
    try {
      const { value } = await clients.value.rpc
        .getSignatureStatuses([signature as Signature], { searchTransactionHistory: true })
        .send(bounded());
      const status = value[0];
      if (!status) return ok({ found: false });
      return ok({ found: true, slot: status.slot, confirmationStatus: status.confirmationStatus, failed: status.err !== null, err: status.err });
    } catch (error) {
      return rpcFailure(error);
    }
  }

  async function transactionSignatures(
    network: NetworkName,
    signature: string,
  ): Promise<Result<{ found: false } | { found: true; failed: boolean; signatures: Record<string, string | null> }, ReadFailureReason>> {
    const clients = clientsOf(network);
    if (!clients.ok) return clients;
    if (!isSignature(signature)) return fail('invalid_argument', 'not a transaction signature');
    try {
      const found = await clients.value.rpc
        .getTransaction(signature as Signature, { encoding: 'base64', maxSupportedTransactionVersion: 0, commitment: 'confirmed' })
        .send(bounded());
      if (!found) return ok({ found: false });
      const wire = getBase64Encoder().encode(found.transaction[0]);
      const transaction = getTransactionDecoder().decode(wire);
      const decoder = getBase58Decoder();
      const signatures: Record<string, string | null> = {};
      for (const [address, bytes] of Object.entries(transaction.signatures)) signatures[address] = bytes ? decoder.decode(bytes) : null;
      return ok({ found: true, failed: found.meta?.err != null, signatures });
    } catch (error) {
      return rpcFailure(error);
    }
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
    { timeoutMs = DEFAULT_CONFIRMATION_TIMEOUT_MS, pollMs = DEFAULT_CONFIRMATION_POLL_MS }: { timeoutMs?: number; pollMs?: number } = {},
  ): Promise<Result<SignatureStatus, ReadFailureReason>> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const status = await signatureStatus(network, signature);
      if (!status.ok) return status;
      const settled = status.value.found && (status.value.confirmationStatus === 'confirmed' || status.value.confirmationStatus === 'finalized');
      if (settled || Date.now() + pollMs > deadline) return status;
      await new Promise((resolve) => setTimeout(resolve, pollMs));
    }
  }

  return { signer, networks, buildExactPayment, usdcBalance, signatureStatus, transactionSignatures, blockHeight, waitForSignature };
}

function readTokenAccount(account: { programAddress: Address; data: Uint8Array }) {
  if (account.programAddress !== TOKEN_PROGRAM_ADDRESS || account.data.length !== getTokenSize()) return undefined;
  return getTokenDecoder().decode(account.data);
}
