/**
 * ABI words written directly, for the few fixed calls a verification of a client's payment makes
 * to USDC (authorizationState, balanceOf, and transferWithAuthorization in its (v, r, s) form) and
 * the words of the EIP-712 digest: each is a selector and 32-byte words, and viem's generic
 * encoder (finding the function among the overloads, formatting its signature, hashing it again
 * for the selector, checking every argument by its type) costs more than the rest of the check.
 * A test holds every encoding equal to viem's encodeFunctionData on many random arguments.
 */
import { toFunctionSelector, type Address, type Hex } from 'viem';
import type { TransferAuthorization } from './abi';

const UINT256_LIMIT = 1n << 256n;
const ADDRESS = /^0x[0-9a-fA-F]{40}$/;
const BYTES32 = /^0x[0-9a-fA-F]{64}$/;
/** 65 bytes r || s || v with v in {0, 1, 27, 28}: what the (v, r, s) form of transferWithAuthorization takes. */
export const ECDSA_SIGNATURE = /^0x[0-9a-fA-F]{128}(00|01|1[bB]|1[cC])$/;

/** A uint256 as one ABI word (64 hex digits, no 0x); a RangeError for anything else. */
export function uintWord(value: bigint): string {
  if (value < 0n || value >= UINT256_LIMIT) throw new RangeError(`${value} is not a uint256`);
  return value.toString(16).padStart(64, '0');
}

/** An address as one ABI word (lowercase, no 0x); a RangeError for anything else. */
export function addressWord(address: string): string {
  if (!ADDRESS.test(address)) throw new RangeError(`${address} is not an address`);
  return `000000000000000000000000${address.slice(2).toLowerCase()}`;
}

/** 32 bytes of hex as one ABI word (lowercase, no 0x); a RangeError for anything else. */
export function bytes32Word(value: string): string {
  if (!BYTES32.test(value)) throw new RangeError(`${value} is not 32 bytes`);
  return value.slice(2).toLowerCase();
}

const AUTHORIZATION_STATE = toFunctionSelector('function authorizationState(address authorizer, bytes32 nonce)');
const BALANCE_OF = toFunctionSelector('function balanceOf(address owner)');
const TRANSFER_WITH_AUTHORIZATION_VRS = toFunctionSelector(
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
);

/** authorizationState(authorizer, nonce): whether the nonce is used. */
export function authorizationStateData(authorizer: Address, nonce: Hex): Hex {
  return `${AUTHORIZATION_STATE}${addressWord(authorizer)}${bytes32Word(nonce)}`;
}

/** balanceOf(owner). */
export function balanceOfData(owner: Address): Hex {
  return `${BALANCE_OF}${addressWord(owner)}`;
}

/**
 * transferWithAuthorization(from, to, value, validAfter, validBefore, nonce, v, r, s) for a 65-byte
 * ECDSA signature (ECDSA_SIGNATURE); v as 27 or 28 whichever way the signature carries it. r and s
 * are passed as they are: the token judges them (a signature of ours to verify is checked first).
 */
export function transferWithAuthorizationVrsData(authorization: TransferAuthorization, signature: Hex): Hex {
  if (!ECDSA_SIGNATURE.test(signature)) throw new RangeError('the signature is not 65 bytes with v in {0, 1, 27, 28}');
  const last = Number.parseInt(signature.slice(130), 16);
  const v = last < 27 ? last + 27 : last;
  return `${TRANSFER_WITH_AUTHORIZATION_VRS}${addressWord(authorization.from)}${addressWord(authorization.to)}${uintWord(
    authorization.value,
  )}${uintWord(authorization.validAfter)}${uintWord(authorization.validBefore)}${bytes32Word(authorization.nonce)}${uintWord(
    BigInt(v),
  )}${signature.slice(2, 66).toLowerCase()}${signature.slice(66, 130).toLowerCase()}`;
}

/** The 32-byte word an eth_call answered, or an Error saying what came instead. */
function onlyWord(result: unknown, what: string): string {
  if (typeof result !== 'string' || !/^0x[0-9a-fA-F]{64}/.test(result)) {
    const said = typeof result !== 'string' ? typeof result : result === '0x' ? 'no data' : result.slice(0, 80);
    throw new Error(`${what} answered ${said}, not a 32-byte word`);
  }
  return result.slice(2, 66);
}

/** An ABI-encoded bool answer (the first word; 0 or 1, as viem decodes it). */
export function decodeBool(result: unknown, what: string): boolean {
  const word = BigInt(`0x${onlyWord(result, what)}`);
  if (word > 1n) throw new Error(`${what} answered ${word}, not a bool`);
  return word === 1n;
}

/** An ABI-encoded uint256 answer (the first word). */
export function decodeUint256(result: unknown, what: string): bigint {
  return BigInt(`0x${onlyWord(result, what)}`);
}
