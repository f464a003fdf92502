/**
 * The EIP-712 digest of an EIP-3009 TransferWithAuthorization, computed directly: the domain
 * separator once per (name, version, chain, token), then one keccak of the struct and one of the
 * digest. It is the hash viem's hashTypedData gives for transferWithAuthorizationTypes (a test
 * compares the two over many authorizations), without its generic type walking and validation,
 * which cost more than the signature itself on a paid call.
 */
import { concatHex, encodeAbiParameters, keccak256, stringToHex, type Address, type Hex } from 'viem';
import type { TransferAuthorization } from './authorization';

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
);

const separators = new Map<string, Hex>();

/** The domain separator, remembered per domain (a handful of networks, never more). */
function domainSeparator(domain: AuthorizationDomain): Hex {
  const key = `${domain.name}\n${domain.version}\n${domain.chainId}\n${domain.verifyingContract.toLowerCase()}`;
  let separator = separators.get(key);
  if (separator === undefined) {
    separator = keccak256(
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
    separators.set(key, separator);
  }
  return separator;
}

const UINT256_LIMIT = 1n << 256n;

/** One 32-byte word of the ABI encoding, without the 0x. */
function word(value: bigint): string {
  if (value < 0n || value >= UINT256_LIMIT) throw new RangeError(`${value} is not a uint256`);
  return value.toString(16).padStart(64, '0');
}

function addressWord(address: Address): string {
  if (!/^0x[0-9a-fA-F]{40}$/.test(address)) throw new RangeError(`${address} is not an address`);
  return address.slice(2).toLowerCase().padStart(64, '0');
}

function bytes32Word(value: Hex): string {
  if (!/^0x[0-9a-fA-F]{64}$/.test(value)) throw new RangeError(`${value} is not 32 bytes`);
  return value.slice(2).toLowerCase();
}

/** hashTypedData of TransferWithAuthorization under `domain`: what the payer signs and the token recovers. */
export function transferAuthorizationDigest(domain: AuthorizationDomain, authorization: TransferAuthorization): Hex {
  const struct = keccak256(
    `${TRANSFER_TYPE_HASH}${addressWord(authorization.from)}${addressWord(authorization.to)}${word(authorization.value)}${word(
      authorization.validAfter,
    )}${word(authorization.validBefore)}${bytes32Word(authorization.nonce)}`,
  );
  return keccak256(concatHex(['0x1901', domainSeparator(domain), struct]));
}
