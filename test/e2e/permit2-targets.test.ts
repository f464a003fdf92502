// Paying targets that ask to be paid through Permit2 (x402 exact with assetTransferMethod
// "permit2"), served by unmodified @x402/express 2.27 and settled by @x402/evm's facilitator
// through x402ExactPermit2Proxy: on MegaETH (MegaUSD, 18 decimals, Permit2 only) and on Polygon
// Amoy (USDC, 6 decimals). {/proxy twice, /relay, /proxy/sim, /relay/sim} x {the two networks};
// every money leg read from the chain: the target gets exactly the price in its token's units,
// the account is charged the credits of the price in micro-USDC plus the fee, a /relay client pays
// price + fee on its own network; our wallet approves Permit2 once per token (one on-chain
// approval, recorded with its gas), never again.
import { decodePaymentSignatureHeader } from '@x402/core/http';
import { getAddress, maxUint256, parseAbi, parseEventLogs, type Address, type Hash } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import type { EvmNetworkName, Peers, Target } from '../../devnet/index';
import { EVM_NETWORKS } from '../../devnet/index';
import { createTestAccount } from '../support/accounts';
import { expectOurReceipt, expectProxyCharged, expectRelayDelivered, paidCallAfter } from '../support/paid-target';
import { ledgerSums, startPeersAndProxyService } from '../support/proxy';
import { payingFetch, relayRequest } from '../support/relay';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const PERMIT2: Address = '0x000000000022D473030F116dDEE9F6B43aC78BA3';
const EXACT_PROXY: Address = '0x402085c248EeA27D92E8b30b2C58ed07f9E20001';
const PRICE = 12_345n;
/** ceil(12,345 x 1.03) micro-USDC: what a /relay client pays. */
const RELAY_TOTAL = 12_716n;
/** ceil(12,345 x 1.03 / 1000) credits: what a /proxy account pays. */
const CREDITS = 13n;

/** Each target network, and the network of the same class a /relay client pays us on. */
const CASES: { network: EvmNetworkName; clientNetwork: EvmNetworkName }[] = [
  { network: 'megaeth', clientNetwork: 'base' },
  { network: 'polygon-amoy', clientNetwork: 'base-sepolia' },
];
const atomic = (network: EvmNetworkName) => PRICE * 10n ** BigInt(EVM_NETWORKS[network].decimals - 6);

let peers: Peers;
let t: TestService;
let db: Db;

beforeAll(async () => {
  ({ peers, t, db } = await startPeersAndProxyService({
    networks: ['base', 'base-sepolia', 'megaeth', 'polygon-amoy'],
    pricesMicroUsdc: { paid: PRICE },
    targets: CASES.map(({ network }) => ({
      name: `permit2-${network}`,
      network,
      x402Version: 2 as const,
      v2Offer: { scheme: 'exact' as const, assetTransferMethod: 'permit2' as const },
    })),
  }));
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

const service = () => peers.wallets.service.evm.address;
const client = () => peers.wallets.client.evm.address;
const erc20Events = parseAbi([
  'event Transfer(address indexed from, address indexed to, uint256 value)',
  'event Approval(address indexed owner, address indexed spender, uint256 value)',
]);

describe.each(CASES)('a target asking for Permit2 on $network', ({ network, clientNetwork }) => {
  const target = (): Target => peers.targets[`permit2-${network}`]!;
  const chain = () => peers.evmChains[network]!;
  const token = () => getAddress(EVM_NETWORKS[network].usdc);
  const price = atomic(network);

  async function balances() {
    return {
      service: await peers.usdcBalance(network, service()),
      target: await peers.usdcBalance(network, target().routes.paid.payTo),
    };
  }

  /** The token's transfers in a settlement, read from its receipt: sent to the Permit2 proxy. */
  async function settlementTransfers(hash: string) {
    const receipt = await chain().publicClient.getTransactionReceipt({ hash: hash as Hash });
    expect(receipt.status).toBe('success');
    expect(getAddress(receipt.to!)).toBe(EXACT_PROXY);
    return parseEventLogs({ abi: erc20Events, logs: receipt.logs, eventName: 'Transfer' }).map(({ args }) => args);
  }

  /** Every approval our wallet gave Permit2 on the token, from the chain's logs. */
  async function approvals() {
    const logs = await chain().publicClient.getLogs({
      address: token(),
      event: erc20Events[1],
      args: { owner: service(), spender: PERMIT2 },
      fromBlock: 0n,
    });
    return logs.map((log) => ({ tx: log.transactionHash, value: log.args.value }));
  }

  /** The last paid call the target saw: a PAYMENT-SIGNATURE carrying our Permit2 witness transfer. */
  function paidPermit(unpaidCalls: number) {
    const payment = decodePaymentSignatureHeader(paidCallAfter(target(), unpaidCalls).payment!);
    expect(payment.accepted).toMatchObject({ scheme: 'exact', extra: { assetTransferMethod: 'permit2' } });
    expect(payment.payload).toMatchObject({
      permit2Authorization: {
        from: service(),
        spender: EXACT_PROXY,
        permitted: { token: token(), amount: price.toString() },
        witness: { to: getAddress(target().routes.paid.payTo), validAfter: '0' },
      },
    });
  }

  it('/proxy pays it twice: our wallet approves Permit2 once (recorded with its gas), each payment moves exactly the price', async () => {
    expect(await approvals()).toEqual([]);
    for (const round of [1, 2]) {
      target().reset();
      const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
      const before = await balances();

      const res = await t.client.post(
        '/proxy',
        { api_url: target().routes.paid.url, method: 'GET' },
        { headers: { 'x-api-key': key } },
      );

      expect(res.status, res.text).toBe(200);
      expect(res.body).toEqual({ ok: true, route: 'paid', target: target().name, network });
      paidPermit(1);
      const receipt = JSON.parse(Buffer.from(res.headers.get('x-payment-response')!, 'base64').toString()) as {
        transaction: string;
      };
      expectOurReceipt(res.headers, network, service(), receipt.transaction);
      expect(await settlementTransfers(receipt.transaction)).toEqual([
        { from: service(), to: getAddress(target().routes.paid.payTo), value: price },
      ]);
      expect(await balances()).toEqual({ service: before.service - price, target: before.target + price });
      // Credits are of the price in micro-USDC (the token's units converted by its decimals), plus the fee.
      await expectProxyCharged(db, organisationId, {
        network,
        price: PRICE,
        credits: CREDITS,
        transaction: receipt.transaction,
      });
      const given = await approvals();
      expect(given, `after payment ${round}`).toHaveLength(1);
      expect(given[0]!.value).toBe(maxUint256);
    }
    const [approval] = await approvals();
    const rows = await db.selectFrom('spending_approvals').selectAll().where('network', '=', network).execute();
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      token: token().toLowerCase(),
      owner: service().toLowerCase(),
      spender: PERMIT2.toLowerCase(),
      tx_hash: approval!.tx,
    });
    const approvalReceipt = await chain().publicClient.getTransactionReceipt({ hash: approval!.tx });
    expect(rows[0]!.confirmed_at).toBeInstanceOf(Date);
    expect(BigInt(rows[0]!.gas_used!)).toBe(approvalReceipt.gasUsed);
    expect(BigInt(rows[0]!.gas_fee_wei!)).toBe(approvalReceipt.gasUsed * approvalReceipt.effectiveGasPrice);
  });

  it(`/relay: x402-fetch pays us price + fee on ${clientNetwork}, we pay the target exactly the price through Permit2, approving nothing again`, async () => {
    target().reset();
    const before = await balances();
    const clientBefore = await peers.usdcBalance(clientNetwork, client());
    const serviceOnClientNetwork = await peers.usdcBalance(clientNetwork, service());

    const res = await payingFetch(peers, clientNetwork)(
      `${t.service.url}/relay`,
      relayRequest({ api_url: target().routes.paid.url, method: 'GET' }),
    );

    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ok: true, route: 'paid', target: target().name, network });
    const clientTx = res.headers.get('x-client-payment')!;
    paidPermit(2);
    expect(await peers.usdcBalance(clientNetwork, client())).toBe(clientBefore - RELAY_TOTAL);
    expect(await peers.usdcBalance(clientNetwork, service())).toBe(serviceOnClientNetwork + RELAY_TOTAL);
    expect(await balances()).toEqual({ service: before.service - price, target: before.target + price });
    await expectRelayDelivered(db, clientTx, { network, total: RELAY_TOTAL, price: PRICE });
    expect(await approvals()).toHaveLength(1);
  });

  it('/proxy/sim prices it in micro-USDC and pays nothing', async () => {
    target().reset();
    const { key, organisationId } = await createTestAccount(db, { credits: 100n });
    const before = await balances();

    const res = await t.client.post(
      '/proxy/sim',
      { api_url: target().routes.paid.url, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );

    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({
      requiresPayment: true,
      status: 402,
      paymentRequirements: { scheme: 'exact', network, maxAmountRequired: price.toString() },
      feeBreakdown: { targetAmount: 0.012345, totalCredits: Number(CREDITS) },
    });
    expect(target().requests.map((request) => request.payment)).toEqual([null]);
    expect(await balances()).toEqual(before);
    expect(await ledgerSums(db, organisationId)).toMatchObject({ reserve: 0n, charge: 0n });
  });

  it('/relay/sim prices it (price + fee in micro-USDC) and pays nothing', async () => {
    target().reset();
    const before = await balances();

    const res = await t.client.post('/relay/sim', { api_url: target().routes.paid.url, method: 'GET' });

    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({
      requiresPayment: true,
      targetPaymentRequirements: { scheme: 'exact', network, maxAmountRequired: price.toString() },
      relayFeeBreakdown: { targetAmount: 0.012345, totalAmount: Number(RELAY_TOTAL) / 1e6 },
    });
    expect(target().requests.map((request) => request.payment)).toEqual([null]);
    expect(await balances()).toEqual(before);
  });
});
