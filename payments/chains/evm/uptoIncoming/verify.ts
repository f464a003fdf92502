/**
 * A client's upto payment to us, verified as @x402/evm 2.27's upto facilitator verifies one
 * (verifyUptoPermit2), with us as the facilitator, and stricter where ours are: `accepted` must be
 * the offer we made; the permit's spender is x402UptoPermit2Proxy; its witness pays our wallet and
 * names our wallet as the facilitator; its deadline leaves time to settle (Permit2 accepts it up to
 * the deadline, inclusive) and validAfter has passed; it permits exactly our maximum of our
 * stablecoin; the signature is the payer's (ECDSA recovered with the process's secp256k1 for an
 * account without code, ERC-1271 asked of a deployed contract wallet; an ERC-6492 wrapper of a
 * wallet not deployed yet is refused, as @x402/evm's ECDSA path refuses it). Then the chain: the
 * Permit2 nonce unused, Permit2 allowed to move the maximum, the payer holding it, and the
 * proxy's settle of the maximum simulated from our wallet. The reads leave together with the
 * signature check and are judged after it, in that order.
 */
import { getAddress, isAddress, type Address } from 'viem';
import { assetToMicro } from '../../../basics/money';
import { canonicalNetwork, NETWORK_TABLE, type NetworkName } from '../../../basics/networkTable';
import { recoverSignerLowercase } from '../../../basics/secp256k1';
import { fail, ok, type Result } from '../../../basics/result';
import type { PaymentRequirementsV2 } from '../../../x402/v2';
import { unixSeconds, type ChainDeps, type VerifiedClientPayment, type VerifyFailureReason } from '../../types';
import type { EvmNetworkClients } from '../clients';
import { isRpcUnavailable, rpcUnavailable, simulationFailed } from '../errors';
import { PERMIT2_ADDRESS } from '../permit2';
import { uptoPermitDigestBytes } from './digest';
import {
  permit2NonceHex,
  UPTO_PERMIT2_PROXY_ADDRESS,
  UPTO_SCHEME,
  uptoIdempotencyKey,
  uptoPermitOf,
  type UptoPaymentSignature,
  type UptoPermit,
} from './payload';
import { uptoSettleData } from './settleData';

/** Why an upto payment is refused: the reasons of any client payment, and three of Permit2's. */
export type UptoVerifyFailureReason =
  | VerifyFailureReason
  /** The permit's spender is not x402UptoPermit2Proxy. */
  | 'wrong_spender'
  /** The witness names another facilitator than our wallet: we could not settle it. */
  | 'wrong_facilitator'
  /** The payer has not allowed Permit2 to move the maximum of the token (an ERC-20 approve, once per token). */
  | 'permit2_allowance_missing';

/** An upto payment verified a moment ago: what settling and recording it need. */
export interface VerifiedUptoPayment extends Omit<VerifiedClientPayment, 'payment' | 'requirements'> {
  scheme: typeof UPTO_SCHEME;
  /** The PAYMENT-SIGNATURE as decoded. */
  payment: UptoPaymentSignature;
  /** Our offer it matched. */
  offer: PaymentRequirementsV2;
  permit: UptoPermit;
  /** The most we may settle, in the token's atomic units (the permit's amount); amountMicroUsdc is it in micro-USDC. */
  maximum: bigint;
}

/** Reads of the chain that tell whether the permit can be settled now; never rejects. */
interface OnChainReading {
  state: { ok: true; nonceUsed: boolean; allowance: bigint; balance: bigint } | { ok: false; details: string };
  simulation: { ok: true } | { ok: false; error: unknown };
}

const ERC6492_SUFFIX = '6492649264926492649264926492649264926492649264926492649264926492';
const ERC8010_SUFFIX = '8010801080108010801080108010801080108010801080108010801080108010';

function sameAddress(text: string, address: Address): boolean {
  return isAddress(text, { strict: false }) && getAddress(text) === address;
}

/**
 * Every check of a client's upto payment against the upto offer we made (uptoOffer), on the
 * network the offer names. `minValiditySeconds` (default paymentBounds.minValiditySeconds): the
 * permit must stay valid at least that long, for the call and our settlement.
 */
export async function verifyUptoPayment(
  deps: Pick<ChainDeps, 'chains' | 'clock' | 'paymentBounds'>,
  payment: UptoPaymentSignature,
  offer: PaymentRequirementsV2,
  { minValiditySeconds = deps.paymentBounds.minValiditySeconds }: { minValiditySeconds?: number } = {},
): Promise<Result<VerifiedUptoPayment, UptoVerifyFailureReason>> {
  // Our offer first: what we check against must be something we can be paid with.
  const network = canonicalNetwork(offer.network);
  const clients = network === undefined ? undefined : deps.chains.evm.networks.get(network);
  if (network === undefined || clients === undefined)
    return fail('network_not_offered', `${offer.network} is not an enabled EVM network`);
  const ours = deps.chains.evm.account?.address;
  const chainId = NETWORK_TABLE[network].chainId;
  if (ours === undefined || chainId === undefined) return fail('invalid_offer', `we hold no EVM wallet on ${network}`);
  if (offer.scheme !== UPTO_SCHEME) return fail('invalid_offer', `the offer's scheme is ${offer.scheme}, not upto`);
  if (!sameAddress(offer.asset, clients.usdc))
    return fail('invalid_offer', `the offered asset ${offer.asset} is not our stablecoin on ${network}`);
  if (!sameAddress(offer.payTo, ours))
    return fail('invalid_offer', `the offered payTo ${offer.payTo} is not our wallet`);
  const facilitatorAddress = offer.extra.facilitatorAddress;
  if (typeof facilitatorAddress !== 'string' || !sameAddress(facilitatorAddress, ours))
    return fail('invalid_offer', 'the offer does not name our wallet as the facilitator');
  if (!/^[1-9][0-9]*$/.test(offer.amount))
    return fail('invalid_offer', 'the offered maximum is not a positive integer');
  const maximum = BigInt(offer.amount);

  // What the client says it accepted is the offer we made.
  const { accepted } = payment;
  if (accepted.scheme !== UPTO_SCHEME) return fail('invalid_scheme', `the payment's scheme is ${accepted.scheme}`);
  if (
    canonicalNetwork(accepted.network) !== network ||
    !sameAddress(accepted.asset, clients.usdc) ||
    !sameAddress(accepted.payTo, ours) ||
    accepted.amount !== offer.amount
  )
    return fail('offer_mismatch', 'the payment accepted another offer than ours (network, asset, payTo or amount)');

  // The permit, field by field, as @x402/evm's facilitator checks it.
  const permit = uptoPermitOf(payment.payload);
  if (permit.spender !== UPTO_PERMIT2_PROXY_ADDRESS)
    return fail('wrong_spender', `the permit's spender is ${permit.spender}, not x402UptoPermit2Proxy`);
  if (permit.to !== ours) return fail('wrong_recipient', `the permit pays ${permit.to}, not ${ours}`);
  if (permit.facilitator !== ours)
    return fail('wrong_facilitator', `the permit lets ${permit.facilitator} settle it, not ${ours}`);
  const now = unixSeconds(deps.clock);
  if (permit.deadline < now + BigInt(minValiditySeconds))
    return fail(
      'expired',
      `the permit's deadline ${permit.deadline} is less than ${minValiditySeconds} s from now (${now})`,
    );
  if (permit.validAfter > now) return fail('not_yet_valid', `the permit is valid only from ${permit.validAfter}`);
  if (permit.maximum !== maximum)
    return fail('wrong_amount', `the permit is for at most ${permit.maximum}, our maximum is ${maximum}`);
  if (permit.token !== clients.usdc)
    return fail('wrong_asset', `the permit moves ${permit.token}, not our stablecoin ${clients.usdc}`);

  const reading = readOnChain(deps, clients, permit, ours);
  const signed = await verifySignature(clients, chainId, permit);
  if (!signed.ok) return signed;
  const onChain = judgeOnChain(permit, await reading);
  if (!onChain.ok) return onChain;

  return ok(verifiedUpto(network, clients.usdc, ours, payment, offer, maximum));
}

/**
 * The payer's signature of the permit under Permit2's domain: recovered (65 bytes) for an account
 * without code, ERC-1271 for a deployed contract. The code read and the recovery overlap.
 */
async function verifySignature(
  clients: EvmNetworkClients,
  chainId: number,
  permit: UptoPermit,
): Promise<Result<true, UptoVerifyFailureReason>> {
  const invalid = fail(
    'invalid_signature',
    `the signature is not ${permit.from}'s for this permit on ${clients.network}`,
  );
  if (permit.signature.endsWith(ERC6492_SUFFIX) || permit.signature.endsWith(ERC8010_SUFFIX)) return invalid;
  const codeRead = clients.publicClient.getCode({ address: permit.from }).then(
    (code) => ({ ok: true as const, code }),
    (error: unknown) => ({ ok: false as const, error }),
  );
  let digest: Uint8Array;
  try {
    digest = uptoPermitDigestBytes(chainId, permit);
  } catch {
    return invalid;
  }
  const recovered = recoverSignerLowercase(digest, permit.signature);
  const read = await codeRead;
  if (!read.ok) return rpcUnavailable(read.error);
  const deployed = read.code !== undefined && read.code !== '0x';
  if (!deployed) return recovered !== undefined && recovered === permit.from.toLowerCase() ? ok(true) : invalid;
  try {
    const valid = await clients.publicClient.verifyHash({
      address: permit.from,
      hash: `0x${Buffer.from(digest).toString('hex')}`,
      signature: permit.signature,
    });
    return valid ? ok(true) : invalid;
  } catch (error) {
    if (isRpcUnavailable(error)) return rpcUnavailable(error);
    return invalid;
  }
}

/** The nonce's state, Permit2's allowance, the payer's balance, and the settle of the maximum dry-run from our wallet. */
async function readOnChain(
  deps: Pick<ChainDeps, 'chains'>,
  clients: EvmNetworkClients,
  permit: UptoPermit,
  ours: Address,
): Promise<OnChainReading> {
  const { evm } = deps.chains;
  const network: NetworkName = clients.network;
  const [nonceUsed, allowance, balance, simulation] = await Promise.all([
    evm.permit2NonceUsed(network, permit.from, permit2NonceHex(permit.nonce)),
    evm.permit2Allowance(network, permit.from),
    evm.usdcBalance(network, permit.from),
    Promise.resolve()
      .then(() =>
        clients.publicClient.call({
          account: ours,
          to: UPTO_PERMIT2_PROXY_ADDRESS,
          data: uptoSettleData(permit, permit.maximum),
        }),
      )
      .then(
        () => ({ ok: true as const }),
        (error: unknown) => ({ ok: false as const, error }),
      ),
  ]);
  if (!nonceUsed.ok) return { state: nonceUsed, simulation };
  if (!allowance.ok) return { state: allowance, simulation };
  if (!balance.ok) return { state: balance, simulation };
  return {
    state: { ok: true, nonceUsed: nonceUsed.value, allowance: allowance.value, balance: balance.value },
    simulation,
  };
}

/** Nonce unused, Permit2 allowed, the balance enough, the dry run succeeded: judged in that order. */
function judgeOnChain(permit: UptoPermit, reading: OnChainReading): Result<true, UptoVerifyFailureReason> {
  const { state, simulation } = reading;
  if (!state.ok) return fail('rpc_unavailable', state.details);
  if (state.nonceUsed)
    return fail('nonce_already_used', `the Permit2 nonce ${permit.nonce} of ${permit.from} is already used`);
  if (state.allowance < permit.maximum)
    return fail(
      'permit2_allowance_missing',
      `${permit.from} allows Permit2 ${state.allowance} of ${permit.token}, the permit needs ${permit.maximum}: approve Permit2 (${PERMIT2_ADDRESS}) on the token first`,
    );
  if (state.balance < permit.maximum)
    return fail(
      'insufficient_funds',
      `${permit.from} holds ${state.balance}, the permit's maximum is ${permit.maximum}`,
    );
  if (!simulation.ok) {
    if (isRpcUnavailable(simulation.error)) return rpcUnavailable(simulation.error);
    return simulationFailed(simulation.error);
  }
  return ok(true);
}

/**
 * An upto payment as it was verified and recorded (the PAYMENT-SIGNATURE and our offer, stored on
 * its row), rebuilt without reading the chain: what settling it later, or reading our settlement of
 * it, needs. Undefined when the stored offer names a network we do not know or no wallet now.
 */
export function storedUptoPayment(
  deps: Pick<ChainDeps, 'chains'>,
  stored: { payment: UptoPaymentSignature; offer: PaymentRequirementsV2; maximum: bigint },
): VerifiedUptoPayment | undefined {
  const network = canonicalNetwork(stored.offer.network);
  const clients = network === undefined ? undefined : deps.chains.evm.networks.get(network);
  const ours = deps.chains.evm.account?.address;
  if (network === undefined || clients === undefined || ours === undefined) return undefined;
  return verifiedUpto(network, clients.usdc, ours, stored.payment, stored.offer, stored.maximum);
}

/** An upto payment's facts, as verified now or recorded then. */
function verifiedUpto(
  network: NetworkName,
  asset: Address,
  payTo: VerifiedUptoPayment['payTo'],
  payment: UptoPaymentSignature,
  offer: PaymentRequirementsV2,
  maximum: bigint,
): VerifiedUptoPayment {
  const permit = uptoPermitOf(payment.payload);
  return {
    scheme: UPTO_SCHEME,
    network,
    chainType: 'evm',
    payer: permit.from,
    payTo,
    asset,
    amountMicroUsdc: assetToMicro(maximum, NETWORK_TABLE[network].decimals),
    idempotencyKey: uptoIdempotencyKey(network, asset, payment.payload),
    // Permit2 accepts the permit up to its deadline, inclusive: from deadline + 1 it cannot be settled.
    validBefore: permit.deadline + 1n,
    payment,
    offer,
    permit,
    maximum,
  };
}
