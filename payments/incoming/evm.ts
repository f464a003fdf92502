/**
 * EVM side of relay payments: strict verification of an EIP-3009 TransferWithAuthorization paid to
 * us, and the transactions our wallet submits (settling an authorization, refunding a payer).
 *
 * Verification is stricter than the x402 package's: the value must equal the amount asked (not be
 * at least it), the authorization must still be valid long enough to settle, the nonce must be
 * unused on chain, and the transfer is simulated. The EIP-712 domain is our table's (name, version,
 * chain id) with the offered asset as verifying contract, never what the client claims.
 *
 * Signatures: the chain's public client verifies them (viem's verifyTypedData), which covers a
 * 65-byte ECDSA signature of an EOA, an ERC-1271 contract wallet (any length: USDC v2.2 asks the
 * wallet) and an ERC-6492 wrapper of a counterfactual wallet. A 6492 wrapper is unwrapped before
 * simulating and settling (USDC knows nothing of it); a wrapper whose wallet is not deployed yet
 * is refused: deploying means sending the wrapper's factory call, chosen by the payer, from our
 * funded wallet, which we do not do. ECDSA settles with transferWithAuthorization's (v, r, s)
 * form (every FiatToken v2); anything else with its `bytes signature` form (FiatToken v2.2).
 *
 * Our submissions are signed locally and their hash handed to the caller before broadcasting, so
 * the hash is stored first and a crash leaves a row that names the transaction.
 */
import {
  BaseError,
  encodeFunctionData,
  getAddress,
  HttpRequestError,
  isAddress,
  isErc6492Signature,
  isErc8010Signature,
  parseErc6492Signature,
  keccak256,
  parseAbi,
  parseSignature,
  parseTransaction,
  TimeoutError,
  TransactionReceiptNotFoundError,
  isAddressEqual,
  recoverAddress,
  zeroAddress,
  type Address,
  type Hash,
  type Hex,
} from 'viem';
import {
  logsShowAuthorizationUse,
  revertReason,
  type EvmNetworkClients,
  type TransferAuthorization,
} from '../networks/evm';
import { transferAuthorizationDigest, type AuthorizationDomain } from '../networks/evm/digest';
import { NETWORK_TABLE, type NetworkName } from '../networkTable';
import { type ExactEvmPayload, type PaymentPayload, type PaymentRequirements } from '../x402/types';
import { fail, ok, type Result } from '../result';
import { SubmissionQueueFull } from '../networks/submissions';
import type { Deps } from '../deps';
import { unixSeconds, type VerifiedClientPayment, type VerifyFailureReason } from './types';

/** The (v, r, s) form: every FiatToken v2 has it; the bytes form (smart-wallet signatures) came with v2.2. */
export const relayUsdcAbi = parseAbi([
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, bytes signature)',
  'function transfer(address to, uint256 value) returns (bool)',
  'function balanceOf(address owner) view returns (uint256)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
]);

/** 65 bytes r || s || v with v in {0, 1, 27, 28}: what the (v, r, s) form of transferWithAuthorization takes. */
const ECDSA_SIGNATURE = /^0x[0-9a-fA-F]{128}(00|01|1[bB]|1[cC])$/;

/** A client's authorization as we check and submit it. */
export interface CheckedAuthorization extends TransferAuthorization {
  /** What USDC is given: the payer's signature, unwrapped when it came in an ERC-6492 wrapper. */
  signature: Hex;
  /** The signature as the payer sent it (verified as such); differs from `signature` only for ERC-6492. */
  sentSignature: Hex;
  /** Set when the payer sent an ERC-6492 wrapper: the factory call that deploys the wallet. */
  erc6492?: { factory: Address; factoryData: Hex };
}

type Failure = { ok: false; reason: VerifyFailureReason; details: string };

export function isRpcUnavailable(error: unknown): boolean {
  if (!(error instanceof BaseError)) return false;
  return error.walk((cause) => cause instanceof TimeoutError || cause instanceof HttpRequestError) !== null;
}

function rpcUnavailable(error: unknown): Failure {
  const message =
    error instanceof BaseError ? error.shortMessage : error instanceof Error ? error.message : String(error);
  return fail('rpc_unavailable', message);
}

/** A dry run that reverted: the contract's own reason when the node returned one (the payer can act on it). */
function simulationFailed(error: unknown): { ok: false; reason: 'simulation_failed'; details: string } {
  const reason = revertReason(error);
  if (reason !== undefined) return fail('simulation_failed', `the transfer reverts: ${reason}`);
  return fail('simulation_failed', error instanceof BaseError ? error.shortMessage : String(error));
}

function clientsOf(deps: Pick<Deps, 'chains'>, network: NetworkName): EvmNetworkClients | undefined {
  return deps.chains.evm.networks.get(network);
}

export function authorizationOf(payment: PaymentPayload): CheckedAuthorization {
  const { authorization, signature } = payment.payload as ExactEvmPayload;
  const sent = signature as Hex;
  const common = {
    from: getAddress(authorization.from),
    to: getAddress(authorization.to),
    value: BigInt(authorization.value),
    validAfter: BigInt(authorization.validAfter),
    validBefore: BigInt(authorization.validBefore),
    nonce: authorization.nonce.toLowerCase() as Hex,
    sentSignature: sent,
  };
  if (!isErc6492Signature(sent)) return { ...common, signature: sent };
  let unwrapped: ReturnType<typeof parseErc6492Signature>;
  try {
    unwrapped = parseErc6492Signature(sent);
  } catch {
    // The 6492 suffix on bytes that do not decode as its wrapper: no signature; verification refuses it.
    return { ...common, signature: sent };
  }
  if (unwrapped.address === undefined) return { ...common, signature: unwrapped.signature };
  return {
    ...common,
    signature: unwrapped.signature,
    erc6492: { factory: getAddress(unwrapped.address), factoryData: unwrapped.data },
  };
}

/** The call our wallet submits: the (v, r, s) form for an ECDSA signature, the `bytes` form for any other. */
export function transferWithAuthorizationData(authorization: CheckedAuthorization): Hex {
  const head = [
    authorization.from,
    authorization.to,
    authorization.value,
    authorization.validAfter,
    authorization.validBefore,
    authorization.nonce,
  ] as const;
  if (!ECDSA_SIGNATURE.test(authorization.signature)) {
    return encodeFunctionData({
      abi: relayUsdcAbi,
      functionName: 'transferWithAuthorization',
      args: [...head, authorization.signature],
    });
  }
  const { r, s, v, yParity } = parseSignature(authorization.signature);
  return encodeFunctionData({
    abi: relayUsdcAbi,
    functionName: 'transferWithAuthorization',
    args: [...head, Number(v ?? 27n + BigInt(yParity)), r, s],
  });
}

/** Every check of an EVM payment against the requirement we offered on `network`. */
export async function verifyEvmPayment(
  payment: PaymentPayload,
  offered: PaymentRequirements,
  network: NetworkName,
  deps: Pick<Deps, 'chains' | 'clock' | 'relayLimits'>,
  { minValiditySeconds = deps.relayLimits.minValiditySeconds, signatureVerified = false } = {},
): Promise<Result<VerifiedClientPayment, VerifyFailureReason>> {
  const clients = clientsOf(deps, network);
  if (!clients) return fail('network_not_offered', `${network} is not an enabled EVM network`);
  const { eip712, chainId } = NETWORK_TABLE[network];
  if (!isAddress(offered.asset) || getAddress(offered.asset) !== clients.usdc || !eip712 || chainId === undefined) {
    return fail('invalid_offer', `the offered asset ${offered.asset} is not USDC on ${network}`);
  }
  if (!isAddress(offered.payTo) || !/^[1-9][0-9]*$/.test(offered.maxAmountRequired)) {
    return fail('invalid_offer', 'the offered payTo or amount is not valid');
  }
  const ours = deps.chains.evm.account?.address;
  if (ours !== undefined && getAddress(offered.payTo) !== ours)
    return fail('invalid_offer', `the offered payTo ${offered.payTo} is not our wallet`);
  const authorization = authorizationOf(payment);
  const amount = BigInt(offered.maxAmountRequired);

  if (authorization.to !== getAddress(offered.payTo))
    return fail('wrong_recipient', `the authorization pays ${authorization.to}, not ${offered.payTo}`);
  if (authorization.value !== amount)
    return fail('wrong_amount', `the authorization is for ${authorization.value}, the price is ${amount}`);
  const now = unixSeconds(deps.clock);
  // The token requires validAfter < block.timestamp < validBefore.
  if (authorization.validAfter >= now)
    return fail('not_yet_valid', `the authorization is valid only after ${authorization.validAfter}`);
  if (authorization.validBefore < now + BigInt(minValiditySeconds)) {
    return fail(
      'expired',
      `the authorization expires at ${authorization.validBefore}, less than ${minValiditySeconds} s from now`,
    );
  }

  // The chain's reads go out at once, beside the signature check (one round trip to the node
  // rather than three); their answers are still judged after the signature's, in the same order.
  const onChainReading = readOnChain(clients, authorization, deps.chains.evm.account?.address);
  if (!signatureVerified) {
    const signed = await verifySignature(clients, authorization, {
      name: eip712.name,
      version: eip712.version,
      chainId,
      verifyingContract: clients.usdc,
    });
    // The reading never rejects: left unread, it leaves nothing unhandled.
    if (!signed.ok) return signed;
  }

  const onChain = judgeOnChain(authorization, await onChainReading);
  if (!onChain.ok) return onChain;

  return ok({
    network,
    chainType: 'evm',
    payer: authorization.from,
    payTo: authorization.to,
    asset: clients.usdc,
    amountMicroUsdc: amount,
    idempotencyKey: { network, asset: clients.usdc, nonceKey: authorization.nonce },
    payment,
    requirements: offered,
    validBefore: authorization.validBefore,
  });
}

/**
 * The payer's signature of this authorization under our domain, as the chain sees it: ECDSA for an
 * account without code, ERC-1271 for a contract, ERC-6492 for a wallet not deployed yet (refused).
 * The digest is the EIP-712 hash computed directly (transferAuthorizationDigest, equal to viem's
 * hashTypedData); viem's verifyHash judges it. The ECDSA recovery, pure CPU, runs while the
 * payer's code is being read, so the round trip and the recovery overlap; it decides only for an
 * account without code, and anything else goes to verifyHash as before.
 */
async function verifySignature(
  clients: EvmNetworkClients,
  authorization: CheckedAuthorization,
  domain: AuthorizationDomain,
): Promise<Result<true, VerifyFailureReason>> {
  const { publicClient } = clients;
  const invalid = fail(
    'invalid_signature',
    `the signature is not ${authorization.from}'s for this authorization on ${clients.network}`,
  );
  // ERC-8010 (EIP-7702 delegation carried in the signature) is not something USDC can be given.
  if (isErc8010Signature(authorization.sentSignature)) return invalid;
  if (isErc6492Signature(authorization.sentSignature) && authorization.erc6492 === undefined) return invalid;
  // Read first: a node that is down answers here, not as a refused signature below.
  const codeRead = publicClient.getCode({ address: authorization.from }).then(
    (code) => ({ ok: true as const, code }),
    (error: unknown) => ({ ok: false as const, error }),
  );
  let hash: Hex;
  try {
    hash = transferAuthorizationDigest(domain, authorization);
  } catch {
    // Fields no EIP-712 encoding takes (the strict decoding refuses them first): no signature of it.
    return invalid;
  }
  // The read leaves the process before the recovery takes the thread.
  await new Promise((resolve) => setImmediate(resolve));
  const recovered = await recoverAddress({ hash, signature: authorization.sentSignature }).catch(() => undefined);
  const read = await codeRead;
  if (!read.ok) return rpcUnavailable(read.error);
  const deployed = read.code !== undefined && read.code !== '0x';
  let valid: boolean;
  if (
    !deployed &&
    authorization.from !== zeroAddress &&
    recovered !== undefined &&
    isAddressEqual(recovered, authorization.from)
  ) {
    valid = true;
  } else {
    try {
      valid = await publicClient.verifyHash({
        address: authorization.from,
        hash,
        signature: authorization.sentSignature,
        // An account without code is checked by recovery here, without a call; anything else on chain.
        mode: deployed ? 'auto' : 'eoa',
      });
    } catch (error) {
      if (isRpcUnavailable(error)) return rpcUnavailable(error);
      return invalid;
    }
  }
  if (!valid) return invalid;
  if (authorization.erc6492 && !deployed) {
    return fail(
      'invalid_signature',
      `${authorization.from} is a counterfactual (ERC-6492) wallet that is not deployed yet; ` +
        `we do not deploy wallets: deploy it (the wrapper's call to ${authorization.erc6492.factory}) and pay again`,
    );
  }
  return ok(true);
}

interface OnChainReading {
  /** authorizationState and balanceOf, or why they could not be read. */
  state: { ok: true; used: boolean; balance: bigint } | { ok: false; error: unknown };
  /** The dry run of the transfer: undefined when it would succeed, else its error. */
  simulation: { ok: true } | { ok: false; error: unknown };
}

/**
 * The reads that say whether the transfer can happen now: the nonce's state, the payer's balance,
 * and the transfer simulated as our wallet would submit it, sent together. Never rejects.
 */
async function readOnChain(
  clients: EvmNetworkClients,
  authorization: CheckedAuthorization,
  sender: Address | undefined,
): Promise<OnChainReading> {
  const { publicClient, usdc } = clients;
  const [state, simulation] = await Promise.all([
    Promise.all([
      publicClient.readContract({
        address: usdc,
        abi: relayUsdcAbi,
        functionName: 'authorizationState',
        args: [authorization.from, authorization.nonce],
      }),
      publicClient.readContract({
        address: usdc,
        abi: relayUsdcAbi,
        functionName: 'balanceOf',
        args: [authorization.from],
      }),
    ]).then(
      ([used, balance]) => ({ ok: true as const, used, balance }),
      (error: unknown) => ({ ok: false as const, error }),
    ),
    publicClient.call({ account: sender, to: usdc, data: transferWithAuthorizationData(authorization) }).then(
      () => ({ ok: true as const }),
      (error: unknown) => ({ ok: false as const, error }),
    ),
  ]);
  return { state, simulation };
}

/** Nonce unused, balance enough, and the transfer's dry run succeeded: judged in that order. */
function judgeOnChain(authorization: CheckedAuthorization, reading: OnChainReading): Result<true, VerifyFailureReason> {
  const { state, simulation } = reading;
  if (!state.ok) return rpcUnavailable(state.error);
  if (state.used)
    return fail(
      'nonce_already_used',
      `the nonce ${authorization.nonce} of ${authorization.from} is already used on chain`,
    );
  if (state.balance < authorization.value)
    return fail(
      'insufficient_funds',
      `${authorization.from} holds ${state.balance}, the payment needs ${authorization.value}`,
    );
  if (!simulation.ok) {
    if (isRpcUnavailable(simulation.error)) return rpcUnavailable(simulation.error);
    return simulationFailed(simulation.error);
  }
  return ok(true);
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
 * chain can say later whether it landed.
 */
export async function submitEvmTransaction(
  deps: Pick<Deps, 'chains' | 'submissions'>,
  network: NetworkName,
  call: { to: Address; data: Hex },
  beforeBroadcast: (signed: { hash: Hash; raw: Hex }, refused?: Hash) => Promise<boolean>,
  beforeSigning?: () => Promise<Result<true, VerifyFailureReason>>,
): Promise<Result<SubmittedTransaction, SubmitFailureReason | VerifyFailureReason>> {
  const clients = clientsOf(deps, network);
  if (!clients) return fail('network_not_enabled', `${network} is not an enabled EVM network`);
  const { walletClient, publicClient } = clients;
  if (!walletClient) return fail('no_wallet', 'EVM_PRIVATE_KEY is not configured');
  const account = walletClient.account;
  try {
    return await deps.submissions.run(
      `${network}:${account.address}`,
      async (): Promise<Result<SubmittedTransaction, SubmitFailureReason | VerifyFailureReason>> => {
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
