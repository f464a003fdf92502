/** The parts of USDC (FiatToken v2, EIP-3009) we call, read and sign for. */
import { parseAbi, parseAbiItem, toEventSelector, type Address, type Hex } from 'viem';

/** An EIP-3009 TransferWithAuthorization, the message of transferWithAuthorizationTypes below. */
export interface TransferAuthorization {
  from: Address;
  to: Address;
  value: bigint;
  validAfter: bigint;
  validBefore: bigint;
  nonce: Hex;
}

export const usdcAbi = parseAbi([
  'function balanceOf(address owner) view returns (uint256)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, bytes signature)',
  'event Transfer(address indexed from, address indexed to, uint256 value)',
]);

export const authorizationUsedEvent = parseAbiItem(
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
);

export const transferWithAuthorizationTypes = {
  TransferWithAuthorization: [
    { name: 'from', type: 'address' },
    { name: 'to', type: 'address' },
    { name: 'value', type: 'uint256' },
    { name: 'validAfter', type: 'uint256' },
    { name: 'validBefore', type: 'uint256' },
    { name: 'nonce', type: 'bytes32' },
  ],
} as const;

/** topic0 of AuthorizationUsed, the event USDC logs when an authorization is spent. */
export const AUTHORIZATION_USED_TOPIC = toEventSelector(authorizationUsedEvent);

interface RawLog {
  address: string;
  topics: readonly (string | null)[];
}

/**
 * Whether these logs (of a successful receipt) hold USDC's AuthorizationUsed for this authorizer and
 * nonce: the token's address and the event's three topics compared as lowercase hex, which is what
 * decoding the event would compare, without decoding every log of the transaction.
 */
export function logsShowAuthorizationUse(
  logs: readonly RawLog[],
  usdc: string,
  { authorizer, nonce }: { authorizer: string; nonce: string },
): boolean {
  const token = usdc.toLowerCase();
  const authorizerTopic = `0x${authorizer.slice(2).toLowerCase().padStart(64, '0')}`;
  const nonceTopic = nonce.toLowerCase();
  return logs.some(
    (log) =>
      log.address.toLowerCase() === token &&
      log.topics.length === 3 &&
      log.topics[0]?.toLowerCase() === AUTHORIZATION_USED_TOPIC &&
      log.topics[1]?.toLowerCase() === authorizerTopic &&
      log.topics[2]?.toLowerCase() === nonceTopic,
  );
}
