/**
 * The call that settles an upto payment, x402UptoPermit2Proxy.settle(permit, amount, owner,
 * witness, signature) as @x402/evm's facilitator builds it (buildUptoPermit2SettleArgs), and the
 * Transfer of the token a successful settlement logs: Permit2 moves `amount` straight from the
 * payer to the witness's recipient.
 */
import { encodeFunctionData, parseAbi, parseAbiItem, toEventSelector, type Address, type Hex } from 'viem';
import type { UptoPermit } from './payload';

export const uptoPermit2ProxyAbi = parseAbi([
  'struct TokenPermissions { address token; uint256 amount; }',
  'struct PermitTransferFrom { TokenPermissions permitted; uint256 nonce; uint256 deadline; }',
  'struct Witness { address to; address facilitator; uint256 validAfter; }',
  'function settle(PermitTransferFrom permit, uint256 amount, address owner, Witness witness, bytes signature)',
]);

const TRANSFER_TOPIC = toEventSelector(
  parseAbiItem('event Transfer(address indexed from, address indexed to, uint256 value)'),
);

/** settle(...) moving `amount` (at most the permit's maximum: the proxy refuses more) under the payer's permit. */
export function uptoSettleData(permit: UptoPermit, amount: bigint): Hex {
  return encodeFunctionData({
    abi: uptoPermit2ProxyAbi,
    functionName: 'settle',
    args: [
      { permitted: { token: permit.token, amount: permit.maximum }, nonce: permit.nonce, deadline: permit.deadline },
      amount,
      permit.from,
      { to: permit.to, facilitator: permit.facilitator, validAfter: permit.validAfter },
      permit.signature,
    ],
  });
}

const topicOf = (address: Address) => `0x${address.slice(2).toLowerCase().padStart(64, '0')}`;

/**
 * The value of each Transfer of `token` from `from` to `to` in these logs (of a successful
 * receipt): what the settlement moved. Topics and data compared as hex, as decoding the event would.
 */
export function transfersIn(
  logs: readonly { address: string; topics: readonly (string | null)[]; data: string }[],
  { token, from, to }: { token: Address; from: Address; to: Address },
): bigint[] {
  const fromTopic = topicOf(from);
  const toTopic = topicOf(to);
  return logs
    .filter(
      (log) =>
        log.address.toLowerCase() === token.toLowerCase() &&
        log.topics.length === 3 &&
        log.topics[0]?.toLowerCase() === TRANSFER_TOPIC &&
        log.topics[1]?.toLowerCase() === fromTopic &&
        log.topics[2]?.toLowerCase() === toTopic &&
        /^0x[0-9a-fA-F]{64}$/.test(log.data),
    )
    .map((log) => BigInt(log.data));
}
