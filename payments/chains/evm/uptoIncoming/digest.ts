/**
 * The EIP-712 digest a payer signs for an upto payment: Permit2's PermitWitnessTransferFrom with
 * the upto witness (to, facilitator, validAfter), under Permit2's domain (name "Permit2", the
 * chain id, the canonical Permit2 address; no version). Computed directly over ABI words
 * (../calldata.ts), as ../digest.ts does for EIP-3009: it is the hash viem's hashTypedData gives
 * for @x402/evm's uptoPermit2WitnessTypes (a test compares the two over many permits), and the one
 * the Permit2 contract checks (its type string is the stub plus the proxy's WITNESS_TYPE_STRING).
 */
import { encodeAbiParameters, keccak256, stringToHex } from 'viem';
import { addressWord, uintWord } from '../calldata';
import { PERMIT2_ADDRESS, permit2WitnessTypes } from '../permit2';
import type { UptoPermit } from './payload';

/** The EIP-712 types @x402/evm's upto client signs (its uptoPermit2WitnessTypes). */
export const uptoPermit2WitnessTypes = {
  ...permit2WitnessTypes,
  // The exact witness with the facilitator allowed to settle it, between payTo and validAfter.
  Witness: [
    { name: 'to', type: 'address' },
    { name: 'facilitator', type: 'address' },
    { name: 'validAfter', type: 'uint256' },
  ],
} as const;

const typeHash = (type: string) => keccak256(stringToHex(type)).slice(2);

const DOMAIN_TYPE_HASH = keccak256(stringToHex('EIP712Domain(string name,uint256 chainId,address verifyingContract)'));
const PERMIT2_NAME_HASH = keccak256(stringToHex('Permit2'));
const PERMIT_TYPE_HASH = typeHash(
  'PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,Witness witness)' +
    'TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)',
);
const TOKEN_PERMISSIONS_TYPE_HASH = typeHash('TokenPermissions(address token,uint256 amount)');
const WITNESS_TYPE_HASH = typeHash('Witness(address to,address facilitator,uint256 validAfter)');

/** 0x1901 and Permit2's domain separator, per chain id (a handful of networks, never more). */
const prefixes = new Map<number, Buffer>();

function digestPrefix(chainId: number): Buffer {
  let prefix = prefixes.get(chainId);
  if (prefix === undefined) {
    const separator = keccak256(
      encodeAbiParameters(
        [{ type: 'bytes32' }, { type: 'bytes32' }, { type: 'uint256' }, { type: 'address' }],
        [DOMAIN_TYPE_HASH, PERMIT2_NAME_HASH, BigInt(chainId), PERMIT2_ADDRESS],
      ),
    );
    prefix = Buffer.from(`1901${separator.slice(2)}`, 'hex');
    prefixes.set(chainId, prefix);
  }
  return prefix;
}

const wordsHash = (words: string) => keccak256(Buffer.from(words, 'hex'), 'bytes');
const hex = (bytes: Uint8Array) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString('hex');

/**
 * hashTypedData of the permit's PermitWitnessTransferFrom (uptoPermit2WitnessTypes) under Permit2's
 * domain on `chainId`, as 32 bytes. A RangeError for a field no ABI word holds.
 */
export function uptoPermitDigestBytes(
  chainId: number,
  permit: Pick<
    UptoPermit,
    'token' | 'maximum' | 'spender' | 'nonce' | 'deadline' | 'to' | 'facilitator' | 'validAfter'
  >,
): Uint8Array {
  const permitted = wordsHash(`${TOKEN_PERMISSIONS_TYPE_HASH}${addressWord(permit.token)}${uintWord(permit.maximum)}`);
  const witness = wordsHash(
    `${WITNESS_TYPE_HASH}${addressWord(permit.to)}${addressWord(permit.facilitator)}${uintWord(permit.validAfter)}`,
  );
  const struct = wordsHash(
    `${PERMIT_TYPE_HASH}${hex(permitted)}${addressWord(permit.spender)}${uintWord(permit.nonce)}${uintWord(
      permit.deadline,
    )}${hex(witness)}`,
  );
  const message = Buffer.allocUnsafe(2 + 32 + 32);
  digestPrefix(chainId).copy(message, 0);
  message.set(struct, 34);
  return keccak256(message, 'bytes');
}
