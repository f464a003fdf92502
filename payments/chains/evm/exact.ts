/**
 * The exact scheme on EVM networks, its wire side (x402/schemes.ts): the payload of an EIP-3009
 * TransferWithAuthorization (`{signature, authorization}`, decimal strings, a 32-byte nonce), and
 * what a target's requirement must hold for us to pay it (an EVM payTo that is not the zero
 * address; the asset compared without regard to case).
 */
import { isAddress, zeroAddress } from 'viem';
import { fail, ok, type Result } from '../../basics/result';
import { isPlainObject } from '../../x402/parse';
import type { PaymentScheme } from '../../x402/schemes';
import type { ExactEvmPayload } from '../../x402/types';

const DIGITS = /^(0|[1-9][0-9]{0,77})$/;
const EVM_ADDRESS = /^0x[0-9a-fA-F]{40}$/;
const BYTES32 = /^0x[0-9a-fA-F]{64}$/;
const MAX_UINT256 = (1n << 256n) - 1n;
/** A plain ECDSA signature is 65 bytes; smart-wallet (EIP-1271/6492) signatures are longer, but bounded here. */
const MAX_SIGNATURE_BYTES = 2048;

function checkPayload(payload: unknown): Result<ExactEvmPayload, 'invalid_payload'> {
  if (!isPlainObject(payload) || !isPlainObject(payload.authorization))
    return fail('invalid_payload', 'EVM payload needs signature and authorization');
  const { signature, authorization } = payload;
  if (
    typeof signature !== 'string' ||
    !/^0x([0-9a-fA-F]{2})+$/.test(signature) ||
    signature.length > 2 + 2 * MAX_SIGNATURE_BYTES
  ) {
    return fail('invalid_payload', 'signature is not hex bytes');
  }
  for (const field of ['from', 'to'] as const) {
    const address = authorization[field];
    if (typeof address !== 'string' || !EVM_ADDRESS.test(address))
      return fail('invalid_payload', `authorization.${field} is not an address`);
  }
  for (const field of ['value', 'validAfter', 'validBefore'] as const) {
    const number = authorization[field];
    if (typeof number !== 'string' || !DIGITS.test(number) || BigInt(number) > MAX_UINT256) {
      return fail('invalid_payload', `authorization.${field} is not a decimal integer string`);
    }
  }
  if (typeof authorization.nonce !== 'string' || !BYTES32.test(authorization.nonce)) {
    return fail('invalid_payload', 'authorization.nonce is not 32 bytes of hex');
  }
  return ok({
    signature,
    authorization: {
      from: authorization.from as string,
      to: authorization.to as string,
      value: authorization.value as string,
      validAfter: authorization.validAfter as string,
      validBefore: authorization.validBefore as string,
      nonce: authorization.nonce,
    },
  });
}

export const EXACT_EVM: PaymentScheme = {
  scheme: 'exact',
  transferMethods: ['eip3009', 'permit2'],
  checkPayload,
  sameAsset: (asset, configured) => asset.toLowerCase() === configured.toLowerCase(),
  recognizes: (payload) => 'authorization' in payload,
  replayIdentity: (payload) => {
    const { authorization } = payload as ExactEvmPayload;
    return { payer: authorization.from.toLowerCase(), payment: authorization.nonce.toLowerCase() };
  },
  recipientProblem: (requirements) =>
    !isAddress(requirements.payTo) || requirements.payTo.toLowerCase() === zeroAddress
      ? { reason: 'invalid_pay_to', details: `payTo ${requirements.payTo} is not an EVM address` }
      : undefined,
};
