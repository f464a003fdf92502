/**
 * The EIP-712 digest of an EIP-3009 TransferWithAuthorization, computed directly: the domain
 * separator once per (name, version, chain, token), then one keccak of the struct and one of the
 * digest, over the ABI words written directly (./calldata.ts). It is the hash viem's hashTypedData
 * gives for transferWithAuthorizationTypes (a test compares the two over many authorizations),
 * without its generic type walking and validation, which cost more than the signature itself on a
 * paid call.
 */
import { encodeAbiParameters, keccak256, stringToHex, type Address, type Hex } from 'viem';
import type { TransferAuthorization } from './abi';
import { addressWord, bytes32Word, uintWord } from './calldata';

export interface AuthorizationDomain {
  name: string;
  version: string;
  chainId: number;
  verifyingContract: Address;
}

const DOMAIN_TYPE_HASH = keccak256(
  stringToHex('EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)'),
);
const TRANSFER_TYPE_HASH = keccak256(
  stringToHex(
    'TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)',
  ),
).slice(2);

/** 0x1901 and the domain separator, remembered per domain (a handful of networks, never more). */
const prefixes = new Map<string, Buffer>();

function digestPrefix(domain: AuthorizationDomain): Buffer {
  const key = `${domain.name}\n${domain.version}\n${domain.chainId}\n${domain.verifyingContract.toLowerCase()}`;
  let prefix = prefixes.get(key);
  if (prefix === undefined) {
    const separator = keccak256(
      encodeAbiParameters(
        [{ type: 'bytes32' }, { type: 'bytes32' }, { type: 'bytes32' }, { type: 'uint256' }, { type: 'address' }],
        [
          DOMAIN_TYPE_HASH,
          keccak256(stringToHex(domain.name)),
          keccak256(stringToHex(domain.version)),
          BigInt(domain.chainId),
          domain.verifyingContract,
        ],
      ),
    );
    prefix = Buffer.from(`1901${separator.slice(2)}`, 'hex');
    prefixes.set(key, prefix);
  }
  return prefix;
}

/** hashTypedData of TransferWithAuthorization under `domain`, as 32 bytes. */
export function transferAuthorizationDigestBytes(
  domain: AuthorizationDomain,
  authorization: TransferAuthorization,
): Uint8Array {
  // typeHash, from, to, value, validAfter, validBefore, nonce: seven words.
  const struct = Buffer.from(
    `${TRANSFER_TYPE_HASH}${addressWord(authorization.from)}${addressWord(authorization.to)}${uintWord(
      authorization.value,
    )}${uintWord(authorization.validAfter)}${uintWord(authorization.validBefore)}${bytes32Word(authorization.nonce)}`,
    'hex',
  );
  const message = Buffer.allocUnsafe(2 + 32 + 32);
  digestPrefix(domain).copy(message, 0);
  message.set(keccak256(struct, 'bytes'), 34);
  return keccak256(message, 'bytes');
}

/** hashTypedData of TransferWithAuthorization under `domain`: what the payer signs and the token recovers. */
export function transferAuthorizationDigest(domain: AuthorizationDomain, authorization: TransferAuthorization): Hex {
  const digest = transferAuthorizationDigestBytes(domain, authorization);
  return `0x${Buffer.from(digest.buffer, digest.byteOffset, digest.length).toString('hex')}`;
}
