/**
 * x402 `batch-settlement` on EVM (specification scheme_batch_settlement_evm.md; @x402/evm 2.27): the
 * canonical addresses, the channel config, and the EIP-712 digests of a channel id and a voucher,
 * computed directly over ABI words (as ./digest.ts does for EIP-3009) instead of viem's generic
 * hashTypedData, so that a voucher costs one keccak pair and one signature recovery. A unit test
 * holds both digests equal to viem's hashTypedData with @x402/evm's types. Shared by the receiving
 * side (payments/incoming/channels/) and the paying side.
 */
import { encodeAbiParameters, getAddress, keccak256, stringToHex, type Address, type Hex } from 'viem';
import { recoverSignerLowercase } from '../../../basics/secp256k1';
import { addressWord, bytes32Word, uintWord } from '../calldata';

export const BATCH_SETTLEMENT_SCHEME = 'batch-settlement';
export const BATCH_SETTLEMENT_ADDRESS: Address = getAddress('0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003');
export const ERC3009_DEPOSIT_COLLECTOR_ADDRESS: Address = getAddress('0x4020806089470a89826cB9fB1f4059150b550004');
export const PERMIT2_DEPOSIT_COLLECTOR_ADDRESS: Address = getAddress('0x4020425FAf3B746C082C2f942b4E5159887B0005');
/** The contract's bounds on a channel's withdraw delay, in seconds (15 minutes to 30 days). */
export const MIN_WITHDRAW_DELAY_SECONDS = 900;
export const MAX_WITHDRAW_DELAY_SECONDS = 2_592_000;
export const ZERO_ADDRESS: Address = '0x0000000000000000000000000000000000000000';
const UINT128_LIMIT = 1n << 128n;

/** A channel's immutable config: its keccak under the contract's domain is the channel id. */
export interface ChannelConfig {
  payer: Address;
  payerAuthorizer: Address;
  receiver: Address;
  receiverAuthorizer: Address;
  token: Address;
  withdrawDelay: number;
  salt: Hex;
}

/** The EIP-712 domain of the channels contract on a chain (as @x402/evm's getBatchSettlementEip712Domain). */
export function batchSettlementDomain(chainId: number) {
  return {
    name: 'x402 Batch Settlement',
    version: '1',
    chainId,
    verifyingContract: BATCH_SETTLEMENT_ADDRESS,
  } as const;
}

/** @x402/evm's EIP-712 types of the contract's messages. */
export const channelConfigTypes = {
  ChannelConfig: [
    { name: 'payer', type: 'address' },
    { name: 'payerAuthorizer', type: 'address' },
    { name: 'receiver', type: 'address' },
    { name: 'receiverAuthorizer', type: 'address' },
    { name: 'token', type: 'address' },
    { name: 'withdrawDelay', type: 'uint40' },
    { name: 'salt', type: 'bytes32' },
  ],
} as const;
export const voucherTypes = {
  Voucher: [
    { name: 'channelId', type: 'bytes32' },
    { name: 'maxClaimableAmount', type: 'uint128' },
  ],
} as const;
export const refundTypes = {
  Refund: [
    { name: 'channelId', type: 'bytes32' },
    { name: 'nonce', type: 'uint256' },
    { name: 'amount', type: 'uint128' },
  ],
} as const;
export const claimBatchTypes = {
  ClaimBatch: [{ name: 'claims', type: 'ClaimEntry[]' }],
  ClaimEntry: [
    { name: 'channelId', type: 'bytes32' },
    { name: 'maxClaimableAmount', type: 'uint128' },
    { name: 'totalClaimed', type: 'uint128' },
  ],
} as const;

const typeHash = (text: string) => keccak256(stringToHex(text)).slice(2);
const CHANNEL_CONFIG_TYPE_HASH = typeHash(
  'ChannelConfig(address payer,address payerAuthorizer,address receiver,address receiverAuthorizer,address token,uint40 withdrawDelay,bytes32 salt)',
);
const VOUCHER_TYPE_HASH = typeHash('Voucher(bytes32 channelId,uint128 maxClaimableAmount)');

/** 0x1901 and the domain separator, per chain id (a handful, never more). */
const prefixes = new Map<number, Buffer>();

function digestPrefix(chainId: number): Buffer {
  let prefix = prefixes.get(chainId);
  if (prefix === undefined) {
    const separator = keccak256(
      encodeAbiParameters(
        [{ type: 'bytes32' }, { type: 'bytes32' }, { type: 'bytes32' }, { type: 'uint256' }, { type: 'address' }],
        [
          keccak256(stringToHex('EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)')),
          keccak256(stringToHex('x402 Batch Settlement')),
          keccak256(stringToHex('1')),
          BigInt(chainId),
          BATCH_SETTLEMENT_ADDRESS,
        ],
      ),
    );
    prefix = Buffer.from(`1901${separator.slice(2)}`, 'hex');
    prefixes.set(chainId, prefix);
  }
  return prefix;
}

function typedDigest(chainId: number, structHex: string): Uint8Array {
  const message = Buffer.allocUnsafe(66);
  digestPrefix(chainId).copy(message, 0);
  message.set(keccak256(Buffer.from(structHex, 'hex'), 'bytes'), 34);
  return keccak256(message, 'bytes');
}

const toHex = (bytes: Uint8Array): Hex =>
  `0x${Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString('hex')}`;

/** The channel id of a config on a chain (lowercase hex); a RangeError for a malformed config. */
export function channelIdOf(config: ChannelConfig, chainId: number): Hex {
  if (!Number.isInteger(config.withdrawDelay) || config.withdrawDelay < 0 || config.withdrawDelay >= 2 ** 40)
    throw new RangeError(`withdrawDelay ${config.withdrawDelay} is not a uint40`);
  return toHex(
    typedDigest(
      chainId,
      `${CHANNEL_CONFIG_TYPE_HASH}${addressWord(config.payer)}${addressWord(config.payerAuthorizer)}${addressWord(
        config.receiver,
      )}${addressWord(config.receiverAuthorizer)}${addressWord(config.token)}${uintWord(
        BigInt(config.withdrawDelay),
      )}${bytes32Word(config.salt)}`,
    ),
  );
}

/** Channel ids already computed, by chain and config: a channel's config comes with every request it pays. */
const knownIds = new Map<string, Hex>();
const KNOWN_IDS_MAX = 100_000;

/** channelIdOf, remembered (a bounded map, cleared when full): the binding check of a voucher without its two keccaks. */
export function cachedChannelIdOf(config: ChannelConfig, chainId: number): Hex {
  const key = `${chainId}:${config.payer}:${config.payerAuthorizer}:${config.receiver}:${config.receiverAuthorizer}:${config.token}:${config.withdrawDelay}:${config.salt}`;
  let id = knownIds.get(key);
  if (id === undefined) {
    id = channelIdOf(config, chainId);
    if (knownIds.size >= KNOWN_IDS_MAX) knownIds.clear();
    knownIds.set(key, id);
  }
  return id;
}

/** The digest a payer authorizer signs for a voucher (32 bytes). */
export function voucherDigest(chainId: number, channelId: Hex, maxClaimableAmount: bigint): Uint8Array {
  if (maxClaimableAmount < 0n || maxClaimableAmount >= UINT128_LIMIT)
    throw new RangeError(`${maxClaimableAmount} is not a uint128`);
  return typedDigest(chainId, `${VOUCHER_TYPE_HASH}${bytes32Word(channelId)}${uintWord(maxClaimableAmount)}`);
}

/**
 * Whether `signature` is `authorizer`'s ECDSA signature of the voucher (channelId,
 * maxClaimableAmount): one recovery, no chain read. False for anything that is not a 65-byte
 * signature recovering to that address (an EIP-1271 payer's voucher is checked on chain instead).
 */
export function isVoucherSignedBy(
  authorizer: Address,
  chainId: number,
  voucher: { channelId: Hex; maxClaimableAmount: bigint; signature: Hex },
): boolean {
  let digest: Uint8Array;
  try {
    digest = voucherDigest(chainId, voucher.channelId, voucher.maxClaimableAmount);
  } catch {
    return false;
  }
  const signer = recoverSignerLowercase(digest, voucher.signature);
  return signer !== undefined && signer === authorizer.toLowerCase();
}

/** The ERC-3009 collector's data: validAfter, validBefore, salt and the signature (as @x402/evm's buildErc3009CollectorData). */
export function erc3009CollectorData(validAfter: bigint, validBefore: bigint, salt: Hex, signature: Hex): Hex {
  return encodeAbiParameters(
    [{ type: 'uint256' }, { type: 'uint256' }, { type: 'uint256' }, { type: 'bytes' }],
    [validAfter, validBefore, BigInt(salt), signature],
  );
}
