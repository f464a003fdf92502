// EIP-3009 TransferWithAuthorization, signed and encoded as X-PAYMENT without x402-fetch: for tests
// that replay a payment, send many at once, or tamper with one field.
import { randomBytes } from 'node:crypto';
import { getAddress, toHex, type Address, type Hex, type LocalAccount, type TypedDataDomain } from 'viem';
import { transferWithAuthorizationTypes } from '../../payments/chains/evm';
import { EVM_NETWORKS, isEvmNetwork } from '../networks.js';
import {
  encodePaymentHeader,
  X402_VERSION,
  type ExactEvmPayload,
  type PaymentPayload,
  type PaymentRequirements,
} from '../x402.js';

/** The EIP-712 domain of USDC on an EVM network: name and version from the requirements' extra, as x402 clients do. */
export function usdcDomain(requirements: PaymentRequirements): TypedDataDomain {
  if (!isEvmNetwork(requirements.network)) throw new Error(`not an EVM network: ${requirements.network}`);
  const known = EVM_NETWORKS[requirements.network];
  return {
    name: (requirements.extra?.name as string | undefined) ?? known.eip712.name,
    version: (requirements.extra?.version as string | undefined) ?? known.eip712.version,
    chainId: known.chainId,
    verifyingContract: getAddress(requirements.asset),
  };
}

export interface AuthorizationOverrides {
  to?: Address;
  value?: bigint;
  validAfter?: bigint;
  validBefore?: bigint;
  nonce?: Hex;
  /** The network named in X-PAYMENT (the signature still uses the requirements' domain). */
  network?: string;
  /** Sign with another domain, e.g. another chain id. */
  domain?: Partial<TypedDataDomain>;
}

export interface SignedEvmPayment {
  payment: PaymentPayload<ExactEvmPayload>;
  header: string;
}

export function randomNonce(): Hex {
  return toHex(new Uint8Array(randomBytes(32)));
}

/**
 * Signs what the requirements ask for: value = maxAmountRequired, to = payTo, valid from ten
 * minutes ago (as x402-fetch does) until maxTimeoutSeconds from now, a random nonce.
 */
export async function signEvmPayment(
  account: LocalAccount,
  requirements: PaymentRequirements,
  overrides: AuthorizationOverrides = {},
): Promise<SignedEvmPayment> {
  const nowSeconds = BigInt(Math.floor(Date.now() / 1000));
  const authorization = {
    from: account.address,
    to: overrides.to ?? getAddress(requirements.payTo),
    value: overrides.value ?? BigInt(requirements.maxAmountRequired),
    validAfter: overrides.validAfter ?? nowSeconds - 600n,
    validBefore: overrides.validBefore ?? nowSeconds + BigInt(requirements.maxTimeoutSeconds),
    nonce: overrides.nonce ?? randomNonce(),
  };
  const signature = await account.signTypedData({
    domain: { ...usdcDomain(requirements), ...overrides.domain },
    types: transferWithAuthorizationTypes,
    primaryType: 'TransferWithAuthorization',
    message: authorization,
  });
  const payment: PaymentPayload<ExactEvmPayload> = {
    x402Version: X402_VERSION,
    scheme: 'exact',
    network: overrides.network ?? requirements.network,
    payload: {
      signature,
      authorization: {
        ...authorization,
        value: authorization.value.toString(),
        validAfter: authorization.validAfter.toString(),
        validBefore: authorization.validBefore.toString(),
      },
    },
  };
  return { payment, header: encodePaymentHeader(payment) };
}
