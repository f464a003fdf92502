// A batch-settlement target among the peers: the default `v2-batch-polygon-amoy` target, served by
// the unmodified @x402/express 2.27 with @x402/evm's batch-settlement server scheme (in-memory
// channel storage, its own receiver authorizer), asks for `batch-settlement` alone, and the v2
// facilitator (the unmodified @x402/evm batch-settlement facilitator scheme) lists the scheme on
// every EVM network. The unmodified @x402/fetch 2.27 with @x402/evm's batch-settlement client
// scheme (in-memory client storage, its default deposit policy) pays the target directly five
// times: the first call deposits (the client's tokens move once, read from the chain), the next
// four send vouchers only (no transaction, the client's balance unchanged, each answer carrying the
// charged amount); a call the target fails (500) is not charged, and one more voucher follows.
// Then the target's channel manager claims the channel's vouchers and settles them through the
// facilitator, and the target's payTo receives exactly the charged total.
import { x402Client } from '@x402/core/client';
import {
  decodePaymentRequiredHeader,
  decodePaymentResponseHeader,
  decodePaymentSignatureHeader,
} from '@x402/core/http';
import { toClientEvmSigner } from '@x402/evm';
import { BatchSettlementEvmScheme, InMemoryClientChannelStorage } from '@x402/evm/batch-settlement/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { getAddress, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  batchTargetName,
  CAIP2_NETWORKS,
  EVM_NETWORKS,
  startPeers,
  type Peers,
  type Target,
} from '../../devnet/index.js';
import { BATCH_SETTLEMENT_ADDRESS, batchSettlementAbi } from '../../devnet/evm/batch-settlement.js';
import { BATCH_SETTLEMENT_WITHDRAW_DELAY_SECONDS } from '../../devnet/targets/payment-v2.js';
import { ifStarted } from '../support/teardown';

const NETWORK = 'polygon-amoy' as const;
const CAIP2 = CAIP2_NETWORKS[NETWORK];
const PRICE = 10_000n;
const CALLS = 5;
// The server scheme announces ten times the price as its minimum deposit (extra.minDeposit), and
// the client's default policy deposits what is announced.
const DEPOSIT = 10n * PRICE;

let peers: Peers;
let target: Target;

const payer = privateKeyToAccount(generatePrivateKey());
const clientStorage = new InMemoryClientChannelStorage();

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK], pricesMicroUsdc: { paid: PRICE } });
  target = peers.targets[batchTargetName(NETWORK)]!;
  await peers.mint(NETWORK, payer.address, 1_000_000n);
});

afterAll(async () => {
  await ifStarted(peers)?.stop();
});

function payingFetch(): typeof fetch {
  const chain = peers.evmChains[NETWORK]!;
  const client = new x402Client();
  client.register(
    'eip155:*',
    new BatchSettlementEvmScheme(toClientEvmSigner(payer, chain.publicClient), { storage: clientStorage }),
  );
  // Polygon Amoy's USDC is not among @x402/evm's default assets: allowed by name, as a payer would.
  client.setSpendControls({
    allowedAssets: [{ network: CAIP2, asset: getAddress(EVM_NETWORKS[NETWORK].usdc), maxAmountPerPayment: '1000000' }],
  });
  return wrapFetchWithPayment(fetch, client);
}

async function channelOnChain(channelId: Hex) {
  const [balance, totalClaimed] = await peers.evmChains[NETWORK]!.publicClient.readContract({
    address: BATCH_SETTLEMENT_ADDRESS,
    abi: batchSettlementAbi,
    functionName: 'channels',
    args: [channelId],
  });
  return { balance, totalClaimed };
}

describe('a batch-settlement target paid by the unmodified @x402/fetch client', () => {
  it('the v2 facilitator lists batch-settlement on the network, without a receiver authorizer of its own', async () => {
    const supported = (await (await fetch(`${peers.facilitatorV2.url}/supported`)).json()) as {
      kinds: { x402Version: number; scheme: string; network: string; extra?: Record<string, unknown> }[];
    };
    const kinds = supported.kinds.filter((kind) => kind.scheme === 'batch-settlement');
    expect(kinds.map(({ x402Version, network }) => ({ x402Version, network }))).toEqual([
      { x402Version: 2, network: CAIP2 },
    ]);
    expect(kinds[0]!.extra?.receiverAuthorizer).toBeUndefined();
  });

  it('asks for batch-settlement alone, with its receiver authorizer, withdraw delay and minimum deposit', async () => {
    expect(target).toMatchObject({ network: NETWORK, x402Version: 2 });
    expect(target.batchSettlement).toHaveLength(1);
    const [receiver] = target.batchSettlement;
    const response = await fetch(target.routes.paid.url);
    expect(response.status).toBe(402);
    const required = decodePaymentRequiredHeader(response.headers.get('payment-required')!);
    const { eip712, usdc } = EVM_NETWORKS[NETWORK];
    expect(required.accepts).toEqual([
      {
        scheme: 'batch-settlement',
        network: CAIP2,
        amount: PRICE.toString(),
        asset: getAddress(usdc),
        payTo: getAddress(target.payTo),
        maxTimeoutSeconds: 60,
        extra: {
          name: eip712.name,
          version: eip712.version,
          receiverAuthorizer: receiver!.receiverAuthorizer,
          withdrawDelay: BATCH_SETTLEMENT_WITHDRAW_DELAY_SECONDS,
          minDeposit: DEPOSIT.toString(),
        },
      },
    ]);
  });

  it('deposits once, then pays by vouchers alone; the channel manager claims and settles exactly the charged total', async () => {
    const pay = payingFetch();
    const payTo = getAddress(target.payTo);
    const payerStart = await peers.usdcBalance(NETWORK, payer.address);
    const facilitatorCallsBefore = peers.facilitatorV2.calls.length;
    target.reset();

    // First call: a deposit carrying the first voucher, settled on chain through the facilitator.
    const first = await pay(target.routes.paid.url);
    expect(first.status).toBe(200);
    const firstResponse = decodePaymentResponseHeader(first.headers.get('payment-response')!);
    // Its `amount` is the deposit; what the call cost is `extra.chargedAmount`.
    expect(firstResponse).toMatchObject({
      success: true,
      network: CAIP2,
      amount: DEPOSIT.toString(),
      extra: { chargedAmount: PRICE.toString(), channelState: { balance: DEPOSIT.toString(), totalClaimed: '0' } },
    });
    expect(firstResponse.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    expect(await peers.usdcBalance(NETWORK, payer.address)).toBe(payerStart - DEPOSIT);
    const depositCalls = peers.facilitatorV2.calls.slice(facilitatorCallsBefore);
    expect(depositCalls.map((call) => call.path)).toEqual(['/verify', '/settle']);

    // The following calls: vouchers only, no transaction, the client's tokens untouched.
    const answers = [firstResponse];
    for (let call = 2; call <= CALLS; call++) {
      const response = await pay(target.routes.paid.url);
      expect(response.status).toBe(200);
      const settled = decodePaymentResponseHeader(response.headers.get('payment-response')!);
      expect(settled).toMatchObject({
        success: true,
        transaction: '',
        network: CAIP2,
        amount: '',
        extra: {
          chargedAmount: PRICE.toString(),
          channelState: { chargedCumulativeAmount: (BigInt(call) * PRICE).toString() },
        },
      });
      answers.push(settled);
      expect(await peers.usdcBalance(NETWORK, payer.address)).toBe(payerStart - DEPOSIT);
    }
    // The target verified the vouchers itself: the facilitator saw only the deposit.
    expect(peers.facilitatorV2.calls.length - facilitatorCallsBefore).toBe(2);

    // A call the target fails is not charged: the next voucher goes on from the same total.
    const failed = await pay(target.routes.error.url);
    expect(failed.status).toBe(500);
    expect(failed.headers.get('payment-response')).toBeNull();
    const after = await pay(target.routes.paid.url);
    expect(after.status).toBe(200);
    expect(decodePaymentResponseHeader(after.headers.get('payment-response')!)).toMatchObject({
      transaction: '',
      extra: {
        chargedAmount: PRICE.toString(),
        channelState: { chargedCumulativeAmount: ((CALLS + 1) * Number(PRICE)).toString() },
      },
    });

    // What the client sent: a deposit, then vouchers with cumulative ceilings one price apart; the
    // call after the failed one signed the same ceiling again.
    const payments = target.requests
      .filter((request) => request.payment !== null)
      .map((request) => decodePaymentSignatureHeader(request.payment!).payload);
    expect(payments.map((payload) => payload.type)).toEqual(['deposit', ...Array<string>(CALLS + 1).fill('voucher')]);
    const vouchers = payments.map((payload) => payload.voucher as { channelId: Hex; maxClaimableAmount: string });
    expect(vouchers.map((voucher) => BigInt(voucher.maxClaimableAmount) / PRICE)).toEqual([1n, 2n, 3n, 4n, 5n, 6n, 6n]);
    const channelId = vouchers[0]!.channelId;
    expect(new Set(vouchers.map((voucher) => voucher.channelId))).toEqual(new Set([channelId]));
    expect(await channelOnChain(channelId)).toEqual({ balance: DEPOSIT, totalClaimed: 0n });

    // The target's channel manager claims and settles through the facilitator.
    const charged = BigInt(CALLS + 1) * PRICE;
    const receiverBefore = await peers.usdcBalance(NETWORK, payTo);
    const { claims, settle } = await target.batchSettlement[0]!.manager.claimAndSettle();
    expect(claims).toEqual([{ vouchers: 1, transaction: expect.stringMatching(/^0x[0-9a-f]{64}$/) as string }]);
    expect(settle?.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    expect(await channelOnChain(channelId)).toEqual({ balance: DEPOSIT, totalClaimed: charged });
    expect(await peers.usdcBalance(NETWORK, payTo)).toBe(receiverBefore + charged);
    expect(await peers.usdcBalance(NETWORK, payer.address)).toBe(payerStart - DEPOSIT);
  });
});
