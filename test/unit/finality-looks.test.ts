// When a settled EVM transfer is looked at again while its block is above the network's finalized
// head: every few seconds while a reorg dropping it could still be answered by sending it again
// (an authorization not yet expired, our own signed transaction), and once it no longer could,
// when the head can have reached its block at the pace the head has kept (within ten minutes).
// The chain here is a stand-in answering the three reads a look makes: the receipt, the finalized
// head and the latest block.
import { randomBytes } from 'node:crypto';
import { encodeEventTopics, getAddress, toHex, type Address, type Hex } from 'viem';
import { describe, expect, it } from 'vitest';
import { authorizationUsedEvent } from '../../payments/chains/evm';
import { followEvmTransfer } from '../../payments/chains/evm/finality';
import type { WatchedTransfer } from '../../payments/chains/family';
import {
  FINALITY_DEADLINE_MARGIN_MS,
  MAX_FINALITY_RECHECK_MS,
  MAX_QUIET_FINALITY_LOOK_MS,
  MIN_FINALITY_RECHECK_MS,
  nextFinalityLook,
} from '../../payments/tracking/finality';
import type { PaymentPayload } from '../../payments/x402/types';

const NETWORK = 'base-sepolia';
const USDC: Address = '0x036CbD53842c5426634e7929541eC2318f3dCF7e';
const PAYER: Address = getAddress(toHex(randomBytes(20)));
const NONCE: Hex = toHex(randomBytes(32));
const TX: Hex = toHex(randomBytes(32));

/** Base's pace: a block every 2 s; the finalized head 600 blocks (20 minutes) behind the latest. */
const LATEST = { number: 10_600n, timestamp: 1_800_000_000n };
const FINALIZED = { number: 10_000n, timestamp: LATEST.timestamp - 1_200n };
/** Mined a minute ago: 570 blocks above the finalized head, 19 minutes from it at its pace. */
const BLOCK = LATEST.number - 30n;

describe('nextFinalityLook', () => {
  const now = new Date('2027-01-01T00:10:00Z');
  const created = new Date(now.getTime() - 60 * 60_000);
  it('a quarter of the age, bounded, when the reading says nothing of a quiet time', () => {
    expect(nextFinalityLook(now, created).getTime() - now.getTime()).toBe(MAX_FINALITY_RECHECK_MS);
    expect(nextFinalityLook(now, new Date(now.getTime() - 8_000)).getTime() - now.getTime()).toBe(2_000);
  });

  it('after the quiet time, within MAX_QUIET_FINALITY_LOOK_MS, and never sooner than the usual look', () => {
    expect(nextFinalityLook(now, created, 120_000).getTime() - now.getTime()).toBe(120_000);
    expect(nextFinalityLook(now, created, 3_600_000).getTime() - now.getTime()).toBe(MAX_QUIET_FINALITY_LOOK_MS);
    expect(nextFinalityLook(now, created, 500).getTime() - now.getTime()).toBe(MAX_FINALITY_RECHECK_MS);
  });

  it('while a drop could still be sent again: a look falls before the authorization expires, the next one just after', () => {
    const after = (ms: number) => now.getTime() + ms;
    // An hour old (usual look 30 s away), expiring in 20 s: looked at 10 s before it expires.
    expect(nextFinalityLook(now, created, undefined, after(20_000)).getTime()).toBe(
      after(20_000 - FINALITY_DEADLINE_MARGIN_MS),
    );
    // Within the margin: the next look is a second after it expires (final, or lost if dropped).
    expect(nextFinalityLook(now, created, undefined, after(4_000)).getTime()).toBe(
      after(4_000 + MIN_FINALITY_RECHECK_MS),
    );
    // Far from it, or once expired: the usual looks.
    expect(nextFinalityLook(now, created, undefined, after(600_000)).getTime()).toBe(after(MAX_FINALITY_RECHECK_MS));
    expect(nextFinalityLook(now, created, undefined, after(-1_000)).getTime()).toBe(after(MAX_FINALITY_RECHECK_MS));
    // Never sooner than a second from now.
    expect(nextFinalityLook(now, created, undefined, after(FINALITY_DEADLINE_MARGIN_MS + 200)).getTime()).toBe(
      after(MIN_FINALITY_RECHECK_MS),
    );
  });
});

/** A stand-in chain: the receipt of TX in `block` with `logs`, the finalized head and the latest block; counts the reads. */
function chainReading(
  logs: Array<{ address: Address; topics: Hex[]; data: Hex }>,
  block = BLOCK,
  heads: { finalized: typeof FINALIZED; latest: typeof LATEST } = { finalized: FINALIZED, latest: LATEST },
) {
  const reads: string[] = [];
  const publicClient = {
    getTransactionReceipt: () => {
      reads.push('receipt');
      return Promise.resolve({ status: 'success', blockNumber: block, logs });
    },
    getBlock: ({ blockTag }: { blockTag: string }) => {
      reads.push(blockTag);
      return Promise.resolve(blockTag === 'finalized' ? heads.finalized : heads.latest);
    },
  };
  const deps = {
    chains: { evm: { networks: new Map([[NETWORK, { publicClient, usdc: USDC }]]) } },
  } as unknown as Parameters<typeof followEvmTransfer>[2];
  return { deps, reads };
}

const authorizationUsed = {
  address: USDC,
  topics: encodeEventTopics({ abi: [authorizationUsedEvent], args: { authorizer: PAYER, nonce: NONCE } }) as Hex[],
  data: '0x' as Hex,
};

function ourAuthorization(validBefore: bigint): PaymentPayload {
  return {
    x402Version: 1,
    scheme: 'exact',
    network: NETWORK,
    payload: {
      signature: toHex(randomBytes(65)),
      authorization: {
        from: PAYER,
        to: getAddress(toHex(randomBytes(20))),
        value: '10000',
        validAfter: '0',
        validBefore: validBefore.toString(),
        nonce: NONCE,
      },
    },
  } as unknown as PaymentPayload;
}

function watched(transfer: WatchedTransfer['transfer']): WatchedTransfer {
  return { network: NETWORK, txHash: TX, transfer, storeTransaction: () => Promise.resolve(true) };
}

const FINALIZED_HEAD = { head: 'finalized', watchSeconds: 3600 } as const;

describe('a look at a transfer above the finalized head', () => {
  it('while its authorization can still be sent again: pending, looked at again as usual', async () => {
    const { deps, reads } = chainReading([authorizationUsed]);
    const reading = await followEvmTransfer(
      watched({ payment: ourAuthorization(LATEST.timestamp + 30n) }),
      FINALIZED_HEAD,
      deps,
    );
    expect(reading).toMatchObject({ state: 'pending', blockNumber: BLOCK });
    expect(reading.state === 'pending' && reading.quietMs).toBeUndefined();
    expect(reads).toEqual(['receipt', 'finalized', 'latest']);
  });

  it('once its authorization expired: quiet until the head can have reached its block', async () => {
    const { deps } = chainReading([authorizationUsed]);
    const reading = await followEvmTransfer(
      watched({ payment: ourAuthorization(LATEST.timestamp - 1n) }),
      FINALIZED_HEAD,
      deps,
    );
    expect(reading).toMatchObject({ state: 'pending', blockNumber: BLOCK, quietMs: 570 * 2_000 });
  });

  it('our own signed transaction (a refund), which can always be sent again: looked at as usual', async () => {
    const { deps, reads } = chainReading([]);
    const reading = await followEvmTransfer(watched({ raw: '0x02' }), FINALIZED_HEAD, deps);
    expect(reading).toMatchObject({ state: 'pending', blockNumber: BLOCK });
    expect(reading.state === 'pending' && reading.quietMs).toBeUndefined();
    expect(reads).toEqual(['receipt', 'finalized']);
  });

  it('a payment nothing of ours can send again (a Permit2 transfer its facilitator settled): quiet from the first look', async () => {
    const { deps } = chainReading([]);
    const permit2 = { x402Version: 2, payload: { permit2Authorization: {}, signature: '0x' } };
    const reading = await followEvmTransfer(
      watched({ payment: permit2 as unknown as WatchedTransfer['transfer']['payment'] }),
      FINALIZED_HEAD,
      deps,
    );
    expect(reading).toMatchObject({ state: 'pending', blockNumber: BLOCK, quietMs: 570 * 2_000 });
  });

  it("quiet for the blocks above the head, as their share of the head's lag; the whole lag from a node behind the block", async () => {
    const expired = () => watched({ payment: ourAuthorization(FINALIZED.timestamp - 1n) });
    const quiet = async (block: bigint, heads?: Parameters<typeof chainReading>[2]) => {
      const reading = await followEvmTransfer(
        expired(),
        FINALIZED_HEAD,
        chainReading([authorizationUsed], block, heads).deps,
      );
      expect(reading.state).toBe('pending');
      return reading.state === 'pending' ? reading.quietMs : undefined;
    };
    expect(await quiet(FINALIZED.number + 1n)).toBe(2_000);
    expect(await quiet(LATEST.number)).toBe(1_200_000);
    expect(await quiet(LATEST.number + 5n)).toBe(1_200_000);
    // Headers that show no pace (the head level with the latest block, or no time between them): the usual looks.
    expect(await quiet(BLOCK, { finalized: FINALIZED, latest: { ...FINALIZED } })).toBeUndefined();
    expect(
      await quiet(BLOCK, { finalized: FINALIZED, latest: { ...LATEST, timestamp: FINALIZED.timestamp } }),
    ).toBeUndefined();
  });

  it('at or below the head: final, whatever can be sent again', async () => {
    const { deps, reads } = chainReading([authorizationUsed], FINALIZED.number);
    const reading = await followEvmTransfer(
      watched({ payment: ourAuthorization(LATEST.timestamp - 1n) }),
      FINALIZED_HEAD,
      deps,
    );
    expect(reading).toMatchObject({ state: 'final', blockNumber: FINALIZED.number });
    expect(reads).toEqual(['receipt', 'finalized']);
  });
});

describe('a look at a transfer under a depth rule of several blocks', () => {
  const DEPTH_RULE = { blocks: 3, watchSeconds: 3600 } as const;

  it('at its depth while its authorization can still be sent again: pending until it expires, since a deeper reorg can still be answered', async () => {
    const { deps } = chainReading([authorizationUsed], LATEST.number - 5n);
    const reading = await followEvmTransfer(
      watched({ payment: ourAuthorization(LATEST.timestamp + 30n) }),
      DEPTH_RULE,
      deps,
    );
    expect(reading).toMatchObject({
      state: 'pending',
      blockNumber: LATEST.number - 5n,
      sendableUntil: LATEST.timestamp + 30n,
    });
    expect(reading).toMatchObject({ held: true });
    expect(reading.details).toMatch(/3 blocks deep or more; final once its authorization expires/);
  });

  it('at its depth once its authorization expired: final', async () => {
    const { deps } = chainReading([authorizationUsed], LATEST.number - 5n);
    const reading = await followEvmTransfer(watched({ payment: ourAuthorization(LATEST.timestamp) }), DEPTH_RULE, deps);
    expect(reading).toMatchObject({ state: 'final', blockNumber: LATEST.number - 5n });
  });

  it('a one-block rule (a chain that finalizes each block): final at once', async () => {
    const { deps } = chainReading([authorizationUsed], LATEST.number);
    const reading = await followEvmTransfer(
      watched({ payment: ourAuthorization(LATEST.timestamp + 30n) }),
      { blocks: 1, watchSeconds: 600 },
      deps,
    );
    expect(reading).toMatchObject({ state: 'final', blockNumber: LATEST.number });
  });

  it('our own signed transaction (a refund): final at its depth', async () => {
    const { deps } = chainReading([], LATEST.number - 5n);
    const reading = await followEvmTransfer(watched({ raw: '0x02' }), DEPTH_RULE, deps);
    expect(reading).toMatchObject({ state: 'final', blockNumber: LATEST.number - 5n });
  });
});
