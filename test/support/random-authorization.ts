/** Random EIP-3009 authorizations for the tests that compare our encodings with viem's. */
import { randomBytes } from 'node:crypto';
import { getAddress, toHex, type Address } from 'viem';
import type { TransferAuthorization } from '../../payments/chains/evm/authorization';

export const randomAddress = (): Address => getAddress(toHex(randomBytes(20)));

/** A random unsigned number of `bytes` bytes. */
export const randomWord = (bytes: number): bigint => BigInt(toHex(randomBytes(bytes)));

/** From and to random, a value of 1 to 32 bytes, times of 4 and 8 bytes, a random nonce. */
export function randomAuthorization(): TransferAuthorization {
  return {
    from: randomAddress(),
    to: randomAddress(),
    value: randomWord(1 + (randomBytes(1)[0]! % 32)),
    validAfter: randomWord(4),
    validBefore: randomWord(8),
    nonce: toHex(randomBytes(32)),
  };
}
