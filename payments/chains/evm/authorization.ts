/**
 * EIP-3009 TransferWithAuthorization for paying targets: the authorization we sign for a target's
 * requirements, its EIP-712 domain, and the X-PAYMENT that carries it.
 */
import { randomBytes } from 'node:crypto';
import { getAddress, isAddress, toHex, zeroAddress, type Address, type Hex } from 'viem';
import type { PrivateKeyAccount } from 'viem/accounts';
import { encodePaymentHeader } from '../../x402/headers';
import { X402_VERSION, type ExactEvmPayload, type PaymentPayload, type PaymentRequirements } from '../../x402/types';
import { fail, ok, type Result } from '../../basics/result';
import { canonicalNetwork, NETWORK_TABLE, type NetworkName } from '../../basics/networkTable';
import type { ClientsOf } from './clients';
import type { TransferAuthorization } from './abi';
import { transferAuthorizationDigest, type AuthorizationDomain } from './digest';

export type { TransferAuthorization } from './abi';

/** Authorizations are valid from this long ago, for clocks behind ours (as x402 clients do). */
export const CLOCK_SKEW_SECONDS = 600n;

export interface SignedAuthorization {
  network: NetworkName;
  /** X-PAYMENT as an object; `header` is its encoding. */
  payment: PaymentPayload<ExactEvmPayload>;
  header: string;
  authorization: TransferAuthorization;
}

export type SignFailureReason =
  'not_evm_network' | 'network_not_enabled' | 'no_wallet' | 'asset_mismatch' | 'invalid_requirements';

export function randomNonce(): Hex {
  return toHex(new Uint8Array(randomBytes(32)));
}

/** The EIP-712 domain of USDC for these requirements: name and version from extra when given, else our table. */
export function usdcDomain(
  network: NetworkName,
  requirements: Pick<PaymentRequirements, 'asset' | 'extra'>,
): AuthorizationDomain {
  const entry = NETWORK_TABLE[network];
  if (entry.chainType !== 'evm' || entry.chainId === undefined || entry.eip712 === undefined) {
    throw new RangeError(`${network} is not an EVM network`);
  }
  const name = requirements.extra?.name;
  const version = requirements.extra?.version;
  return {
    name: typeof name === 'string' && name !== '' ? name : entry.eip712.name,
    version: typeof version === 'string' && version !== '' ? version : entry.eip712.version,
    chainId: entry.chainId,
    verifyingContract: getAddress(requirements.asset),
  };
}

/** What we sign for these requirements (pure): exactly the amount asked, to payTo, valid from 10 minutes ago. */
export function buildTransferAuthorization(
  requirements: Pick<PaymentRequirements, 'payTo' | 'maxAmountRequired' | 'maxTimeoutSeconds'>,
  { from, now, nonce }: { from: Address; now: Date; nonce: Hex },
): TransferAuthorization {
  const nowSeconds = BigInt(Math.floor(now.getTime() / 1000));
  return {
    from,
    to: getAddress(requirements.payTo),
    value: BigInt(requirements.maxAmountRequired),
    validAfter: nowSeconds - CLOCK_SKEW_SECONDS,
    validBefore: nowSeconds + BigInt(requirements.maxTimeoutSeconds),
    nonce,
  };
}

export function evmPaymentPayload(
  network: string,
  signature: Hex,
  authorization: TransferAuthorization,
): PaymentPayload<ExactEvmPayload> {
  return {
    x402Version: X402_VERSION,
    scheme: 'exact',
    network,
    payload: {
      signature,
      authorization: {
        from: authorization.from,
        to: authorization.to,
        value: authorization.value.toString(),
        validAfter: authorization.validAfter.toString(),
        validBefore: authorization.validBefore.toString(),
        nonce: authorization.nonce,
      },
    },
  };
}

/** Our signed authorization for a target's requirements, once they are checked against our configuration. */
export async function signTransferAuthorization(
  {
    clientsOf,
    account,
    nextNonce,
  }: { clientsOf: ClientsOf; account: PrivateKeyAccount | undefined; nextNonce: () => Hex },
  requirements: PaymentRequirements,
  { now, nonce }: { now: Date; nonce?: Hex },
): Promise<Result<SignedAuthorization, SignFailureReason>> {
  const network = canonicalNetwork(requirements.network);
  if (network === undefined || NETWORK_TABLE[network].chainType !== 'evm')
    return fail('not_evm_network', `${requirements.network} is not an EVM network`);
  const clients = clientsOf(network);
  if (!clients.ok) return clients;
  if (account === undefined) return fail('no_wallet', 'EVM_PRIVATE_KEY is not configured');
  // We sign only for our USDC: verifyingContract = asset, so any other asset would move another token.
  if (!isAddress(requirements.asset, { strict: false }) || getAddress(requirements.asset) !== clients.value.usdc) {
    return fail('asset_mismatch', `asset ${requirements.asset} is not USDC on ${network}`);
  }
  if (!isAddress(requirements.payTo) || requirements.payTo.toLowerCase() === zeroAddress) {
    return fail('invalid_requirements', `payTo ${requirements.payTo} is not an EVM address`);
  }
  if (!/^[1-9][0-9]*$/.test(requirements.maxAmountRequired))
    return fail('invalid_requirements', 'maxAmountRequired is not a positive integer');
  if (!Number.isSafeInteger(requirements.maxTimeoutSeconds) || requirements.maxTimeoutSeconds <= 0) {
    return fail('invalid_requirements', 'maxTimeoutSeconds is not a positive whole number');
  }
  if (nonce !== undefined && !/^0x[0-9a-fA-F]{64}$/.test(nonce))
    return fail('invalid_requirements', 'nonce is not 32 bytes of hex');
  const authorization = buildTransferAuthorization(requirements, {
    from: account.address,
    now,
    nonce: nonce ?? nextNonce(),
  });
  // The digest signTypedData would hash (./digest.ts), signed as it would sign it.
  const signature = await account.sign({
    hash: transferAuthorizationDigest(usdcDomain(network, requirements), authorization),
  });
  const payment = evmPaymentPayload(requirements.network, signature, authorization);
  return ok({ network, payment, header: encodePaymentHeader(payment), authorization });
}
