// Reading AuthorizationUsed from a receipt's logs by their topics (logsShowAuthorizationUse) says
// what decoding the event with viem says, for ours and for every near miss.
import { encodeEventTopics, getAddress, parseEventLogs, toHex, type Address, type Hex } from 'viem';
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { authorizationUsedEvent, logsShowAuthorizationUse, usdcAbi } from '../../payments/chains/evm';

const USDC: Address = '0x036CbD53842c5426634e7929541eC2318f3dCF7e';
const OTHER_TOKEN: Address = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913';
const PAYER: Address = getAddress(toHex(randomBytes(20)));
const NONCE: Hex = toHex(randomBytes(32));

function used(address: Address, authorizer: Address, nonce: Hex) {
  return {
    address,
    topics: encodeEventTopics({ abi: [authorizationUsedEvent], args: { authorizer, nonce } }) as Hex[],
    data: '0x' as Hex,
  };
}

const transfer = {
  address: USDC,
  topics: encodeEventTopics({ abi: usdcAbi, eventName: 'Transfer', args: { from: PAYER, to: PAYER } }) as Hex[],
  data: toHex(1n, { size: 32 }),
};

/** What viem's decoding says of the same logs. */
function decoded(logs: ReturnType<typeof used>[], usdc: Address, authorizer: Address, nonce: Hex): boolean {
  return parseEventLogs({
    abi: [authorizationUsedEvent],
    logs: logs.filter((log) => getAddress(log.address) === getAddress(usdc)) as never,
    strict: true,
  }).some(
    (event) =>
      getAddress(event.args.authorizer) === getAddress(authorizer) &&
      event.args.nonce.toLowerCase() === nonce.toLowerCase(),
  );
}

describe('logsShowAuthorizationUse', () => {
  const cases: Array<[string, ReturnType<typeof used>[], boolean]> = [
    ['our authorization, among other logs', [transfer, used(USDC, PAYER, NONCE)], true],
    [
      'our authorization, addresses in lowercase',
      [{ ...used(USDC, PAYER, NONCE), address: USDC.toLowerCase() as Address }],
      true,
    ],
    ['another nonce', [used(USDC, PAYER, toHex(randomBytes(32)))], false],
    ['another authorizer', [used(USDC, getAddress(toHex(randomBytes(20))), NONCE)], false],
    ['another token', [used(OTHER_TOKEN, PAYER, NONCE)], false],
    ['only a Transfer', [transfer], false],
    ['no logs', [], false],
  ];
  for (const [name, logs, expected] of cases) {
    it(`${name}: ${expected ? 'used' : 'not used'}, as decoding says`, () => {
      expect(decoded(logs, USDC, PAYER, NONCE)).toBe(expected);
      expect(logsShowAuthorizationUse(logs, USDC, { authorizer: PAYER, nonce: NONCE })).toBe(expected);
      expect(
        logsShowAuthorizationUse(logs, USDC.toLowerCase(), {
          authorizer: PAYER.toLowerCase(),
          nonce: NONCE.toUpperCase().replace('0X', '0x'),
        }),
      ).toBe(expected);
    });
  }
});
