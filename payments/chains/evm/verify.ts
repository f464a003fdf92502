/**
 * A client's EIP-3009 TransferWithAuthorization paid to us on an EVM network, checked strictly, and
 * the call our wallet submits to settle it (transactions.ts sends it).
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
 */
import {
  encodeFunctionData,
  getAddress,
  isAddress,
  parseErc6492Signature,
  parseAbi,
  zeroAddress,
  type Address,
  type Hex,
} from 'viem';
import { NETWORK_TABLE, type NetworkName } from '../../basics/networkTable';
import { assetToMicro } from '../../basics/money';
import { recoverSignerLowercase } from '../../basics/secp256k1';
import { fail, ok, type Result } from '../../basics/result';
import { type ExactEvmPayload, type PaymentPayload, type PaymentRequirements } from '../../x402/types';
import { unixSeconds, type ChainDeps as Deps, type VerifiedClientPayment, type VerifyFailureReason } from '../types';
import type { TransferAuthorization } from './authorization';
import type { EvmNetworkClients } from './clients';
import {
  authorizationStateData,
  balanceOfData,
  decodeBool,
  decodeUint256,
  ECDSA_SIGNATURE,
  transferWithAuthorizationVrsData,
} from './calldata';
import { transferAuthorizationDigestBytes, type AuthorizationDomain } from './digest';
import { isRpcUnavailable, rpcUnavailable, simulationFailed } from './errors';

/** The (v, r, s) form: every FiatToken v2 has it; the bytes form (smart-wallet signatures) came with v2.2. */
export const relayUsdcAbi = parseAbi([
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, bytes signature)',
  'function transfer(address to, uint256 value) returns (bool)',
  'function balanceOf(address owner) view returns (uint256)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
]);

/** The last 32 bytes that mark an ERC-6492 wrapper (viem's erc6492MagicBytes) and an ERC-8010 one (ox's magicBytes). */
const ERC6492_SUFFIX = '6492649264926492649264926492649264926492649264926492649264926492';
const ERC8010_SUFFIX = '8010801080108010801080108010801080108010801080108010801080108010';

/**
 * Whether a signature ends in a wrapper's 32 magic bytes: viem's isErc6492Signature and
 * isErc8010Signature, without the error ox builds (and throws, and catches) to answer no for every
 * plain signature.
 */
function hasSuffix(signature: Hex, suffix: string): boolean {
  return signature.length >= 2 + suffix.length && signature.endsWith(suffix);
}

/** A client's authorization as we check and submit it. */
export interface CheckedAuthorization extends TransferAuthorization {
  /** What USDC is given: the payer's signature, unwrapped when it came in an ERC-6492 wrapper. */
  signature: Hex;
  /** The signature as the payer sent it (verified as such); differs from `signature` only for ERC-6492. */
  sentSignature: Hex;
  /** Set when the payer sent an ERC-6492 wrapper: the factory call that deploys the wallet. */
  erc6492?: { factory: Address; factoryData: Hex };
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
  if (!hasSuffix(sent, ERC6492_SUFFIX)) return { ...common, signature: sent };
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
  if (ECDSA_SIGNATURE.test(authorization.signature))
    return transferWithAuthorizationVrsData(authorization, authorization.signature);
  const { from, to, value, validAfter, validBefore, nonce, signature } = authorization;
  return encodeFunctionData({
    abi: relayUsdcAbi,
    functionName: 'transferWithAuthorization',
    args: [from, to, value, validAfter, validBefore, nonce, signature],
  });
}

/** The checksummed form of an address written in one case or with a right checksum (isAddress); else undefined. */
function checksummed(address: string): Address | undefined {
  return isAddress(address) ? getAddress(address) : undefined;
}

/**
 * Whether `address` (as isAddress takes it) is `checksummedAddress`. Our own offers carry the
 * checksummed form, which is equal without computing anything.
 */
function sameAddress(address: string, checksummedAddress: Address): boolean {
  return address === checksummedAddress || checksummed(address) === checksummedAddress;
}

/** Every check of an EVM payment against the requirement we offered on `network`. */
export async function verifyEvmPayment(
  payment: PaymentPayload,
  offered: PaymentRequirements,
  network: NetworkName,
  deps: Pick<Deps, 'chains' | 'clock' | 'paymentBounds'>,
  { minValiditySeconds = deps.paymentBounds.minValiditySeconds, signatureVerified = false } = {},
): Promise<Result<VerifiedClientPayment, VerifyFailureReason>> {
  const clients = clientsOf(deps, network);
  if (!clients) return fail('network_not_offered', `${network} is not an enabled EVM network`);
  const { eip712, chainId } = NETWORK_TABLE[network];
  if (!sameAddress(offered.asset, clients.usdc) || !eip712 || chainId === undefined) {
    return fail('invalid_offer', `the offered asset ${offered.asset} is not USDC on ${network}`);
  }
  const ours = deps.chains.evm.account?.address;
  const payTo = ours !== undefined && offered.payTo === ours ? ours : checksummed(offered.payTo);
  if (payTo === undefined || !/^[1-9][0-9]*$/.test(offered.maxAmountRequired)) {
    return fail('invalid_offer', 'the offered payTo or amount is not valid');
  }
  if (ours !== undefined && payTo !== ours)
    return fail('invalid_offer', `the offered payTo ${offered.payTo} is not our wallet`);
  const authorization = authorizationOf(payment);
  const amount = BigInt(offered.maxAmountRequired);

  if (authorization.to !== payTo)
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
    amountMicroUsdc: assetToMicro(amount, NETWORK_TABLE[network].decimals),
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
  if (hasSuffix(authorization.sentSignature, ERC8010_SUFFIX)) return invalid;
  if (hasSuffix(authorization.sentSignature, ERC6492_SUFFIX) && authorization.erc6492 === undefined) return invalid;
  // Read first: a node that is down answers here, not as a refused signature below.
  const codeRead = publicClient.getCode({ address: authorization.from }).then(
    (code) => ({ ok: true as const, code }),
    (error: unknown) => ({ ok: false as const, error }),
  );
  let digest: Uint8Array;
  try {
    digest = transferAuthorizationDigestBytes(domain, authorization);
  } catch {
    // Fields no EIP-712 encoding takes (the strict decoding refuses them first): no signature of it.
    return invalid;
  }
  // The read leaves the process before the recovery takes the thread.
  await new Promise((resolve) => setImmediate(resolve));
  // The process's secp256k1 (the native binding where it loads; payments/basics/secp256k1.ts).
  const recovered = recoverSignerLowercase(digest, authorization.sentSignature);
  const read = await codeRead;
  if (!read.ok) return rpcUnavailable(read.error);
  const deployed = read.code !== undefined && read.code !== '0x';
  const signer = authorization.from.toLowerCase();
  let valid: boolean;
  if (!deployed && signer !== zeroAddress && recovered === signer) {
    valid = true;
  } else {
    try {
      valid = await publicClient.verifyHash({
        address: authorization.from,
        hash: `0x${Buffer.from(digest.buffer, digest.byteOffset, digest.length).toString('hex')}`,
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
  // The two reads as eth_call with their calldata written directly (./calldata.ts), as viem's
  // readContract sends them; an answer that is not the word asked for is a failed read. Each part
  // starts in a microtask (still this turn: the reads leave together), so that nothing thrown while
  // building a call can escape as a rejection nobody awaits.
  const read = (data: () => Hex) =>
    Promise.resolve().then(() =>
      publicClient.request({ method: 'eth_call', params: [{ to: usdc, data: data() }, 'latest'] }),
    );
  const [state, simulation] = await Promise.all([
    Promise.all([
      read(() => authorizationStateData(authorization.from, authorization.nonce)),
      read(() => balanceOfData(authorization.from)),
    ])
      .then(([used, balance]) => ({
        ok: true as const,
        used: decodeBool(used, 'authorizationState'),
        balance: decodeUint256(balance, 'balanceOf'),
      }))
      .catch((error: unknown) => ({ ok: false as const, error })),
    Promise.resolve()
      .then(() => publicClient.call({ account: sender, to: usdc, data: transferWithAuthorizationData(authorization) }))
      .then(
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
