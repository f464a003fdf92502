// The calls a verification makes to USDC, encoded directly (payments/chains/evm/calldata.ts), are
// byte for byte viem's encodeFunctionData of the same ABI, and their answers decode as viem's
// decodeFunctionResult decodes them; answers that are not the word asked for are refused.
import { randomBytes } from 'node:crypto';
import { decodeFunctionResult, encodeFunctionData, parseAbi, toHex, type Hex } from 'viem';
import { describe, expect, it } from 'vitest';
import {
  authorizationStateData,
  balanceOfData,
  decodeBool,
  decodeUint256,
  transferWithAuthorizationVrsData,
} from '../../payments/chains/evm/calldata';
import { relayUsdcAbi } from '../../payments/chains/evm/verify';
import { randomAddress, randomAuthorization, randomWord } from '../support/random-authorization';

const RUNS = 500;
/** Hex as clients may send it: either case. */
const anyCase = (hex: Hex): Hex => (randomBytes(1)[0]! % 2 === 0 ? hex : `0x${hex.slice(2).toUpperCase()}`);
const vrsAbi = parseAbi([
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
]);

describe('the calldata of a verification', () => {
  it(`is viem's encodeFunctionData for authorizationState and balanceOf, over ${RUNS} random arguments`, () => {
    for (let index = 0; index < RUNS; index += 1) {
      const owner = randomAddress();
      const nonce = toHex(randomBytes(32));
      expect(authorizationStateData(anyCase(owner), anyCase(nonce))).toBe(
        encodeFunctionData({ abi: relayUsdcAbi, functionName: 'authorizationState', args: [owner, nonce] }),
      );
      expect(balanceOfData(anyCase(owner))).toBe(
        encodeFunctionData({ abi: relayUsdcAbi, functionName: 'balanceOf', args: [owner] }),
      );
    }
  });

  it(`is viem's encodeFunctionData for transferWithAuthorization (v, r, s), over ${RUNS} random authorizations`, () => {
    for (let index = 0; index < RUNS; index += 1) {
      const authorization = randomAuthorization();
      const [r, s] = [toHex(randomBytes(32)), toHex(randomBytes(32))];
      const last = [0, 1, 27, 28][index % 4]!;
      const signature = anyCase(`${r}${s.slice(2)}${last.toString(16).padStart(2, '0')}`);
      const { from, to, value, validAfter, validBefore, nonce } = authorization;
      expect(transferWithAuthorizationVrsData(authorization, signature)).toBe(
        encodeFunctionData({
          abi: vrsAbi,
          functionName: 'transferWithAuthorization',
          args: [from, to, value, validAfter, validBefore, nonce, last < 27 ? last + 27 : last, r, s],
        }),
      );
    }
  });

  it('takes r and s as they come: the token judges them, nothing throws for a zero r', () => {
    const authorization = randomAuthorization();
    expect(transferWithAuthorizationVrsData(authorization, `0x${'00'.repeat(32)}${'11'.repeat(32)}1b`)).toMatch(
      /^0x[0-9a-f]{8}([0-9a-f]{64}){9}$/,
    );
  });

  it('refuses what no such call takes', () => {
    const authorization = { ...randomAuthorization(), value: 1n << 256n };
    const signature: Hex = `0x${'11'.repeat(64)}1b`;
    expect(() => transferWithAuthorizationVrsData(authorization, signature)).toThrow(RangeError);
    expect(() => transferWithAuthorizationVrsData({ ...authorization, value: 1n }, `0x${'11'.repeat(64)}1d`)).toThrow(
      RangeError,
    );
    expect(() => balanceOfData('0x12')).toThrow(RangeError);
    expect(() => authorizationStateData(randomAddress(), '0x1234')).toThrow(RangeError);
  });

  it("decodes the answers as viem's decodeFunctionResult does", () => {
    for (let index = 0; index < RUNS; index += 1) {
      const balance = randomWord(1 + (index % 32));
      const answer = toHex(balance, { size: 32 });
      expect(decodeUint256(answer, 'balanceOf')).toBe(
        decodeFunctionResult({ abi: relayUsdcAbi, functionName: 'balanceOf', data: answer }),
      );
    }
    for (const used of [false, true]) {
      const answer = toHex(used ? 1n : 0n, { size: 32 });
      expect(decodeBool(answer, 'authorizationState')).toBe(used);
      expect(decodeFunctionResult({ abi: relayUsdcAbi, functionName: 'authorizationState', data: answer })).toBe(used);
    }
  });

  it('refuses an answer that is not a word: no data (no contract there), short, not hex, a bool that is not 0 or 1', () => {
    for (const answer of ['0x', '0x01', `0x${'zz'.repeat(32)}`, undefined, null, 7])
      expect(() => decodeUint256(answer, 'balanceOf')).toThrow(/balanceOf answered/);
    expect(() => decodeBool(toHex(2n, { size: 32 }), 'authorizationState')).toThrow(/not a bool/);
  });
});
