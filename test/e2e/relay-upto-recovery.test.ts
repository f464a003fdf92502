// /relay paid by an upto permit when things go wrong after the target was paid. The client is
// unmodified @x402/fetch 2.27 with @x402/evm's upto scheme, paying on Base Sepolia; the target is
// unmodified @x402/express asking upto on Polygon Amoy and settling 7,500 of its 20,000 micro-USDC
// maximum; a fault proxy in front of it breaks or holds our paid call. Every money leg is read from
// the chain.
//   - The target's answer is cut half-way after it settled: we never see its PAYMENT-RESPONSE; the
//     settlement is found on the chain and the permit is settled for exactly what the target used
//     plus the fee, once, before the permit's deadline.
//   - The payer revokes its Permit2 allowance while our paid call is at the target: the target is
//     paid, the permit can no longer be settled. We bear the loss: nothing is taken from the
//     payer, the record says what happened, an error log line names the transaction, payer, network
//     and amount, prs_upto_charges_lost_total grows, and the maximum stays counted against the
//     payer's daily limit.
import { Writable } from 'node:stream';
import { wrapFetchWithPayment } from '@x402/fetch';
import { pino } from 'pino';
import { getAddress, parseAbi, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { startFaultProxy, type FaultProxy } from '../../devnet/faults';
import { atomicAmount, EVM_NETWORKS, type EvmNetworkName, type Peers } from '../../devnet/index';
import { x402ClientV2 } from '../../devnet/peers/v2-client';
import { PERMIT2_ADDRESS } from '../../payments/chains/evm';
import { utcDay } from '../../payments/basics/clock';
import { spentOn } from '../../payments/accounts/limits';
import { growth } from '../support/metrics';
import { peersEnv, pollWebhook } from '../support/proxy';
import { contractFetch, relayRequest, relayRows } from '../support/relay';
import { tableResolver } from '../support/resolver';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';
import { newUptoPayer, RELAY_UPTO_MAX_TOTAL, RELAY_UPTO_USED_TOTAL, startUptoPeers, UPTO_USED } from '../support/upto';

const TARGET = 'upto-less-polygon-amoy';
const NETWORK: EvmNetworkName = 'polygon-amoy';
const CLIENT_NETWORK: EvmNetworkName = 'base-sepolia';
const erc20 = parseAbi(['function approve(address spender, uint256 amount) returns (bool)']);

let peers: Peers;
let t: TestService;
let db: Db;
/** In front of the target: cuts (mode 'cut') or holds (mode 'hold') our paid call. */
let faults: FaultProxy | undefined;
let mode: 'cut' | 'hold' = 'cut';
/** In front of Polygon Amoy's node, for the service only: unreadable (503) while `chainDown`. */
let rpc: FaultProxy | undefined;
let chainDown = false;
/** Whether the chain goes down for the service when our paid call reaches the target (until the test answers). */
let downOnPaidCall = false;
/** The service's log lines at level error and above. */
const errors: Record<string, unknown>[] = [];

const paid = (headers: Record<string, unknown>) =>
  headers['payment-signature'] !== undefined || headers['x-payment'] !== undefined;

beforeAll(async () => {
  peers = await startUptoPeers(CLIENT_NETWORK, NETWORK, TARGET);
  try {
    faults = await startFaultProxy({
      upstream: peers.targets[TARGET]!.url,
      choose: (request) => (paid(request.headers) && mode === 'cut' ? 'reset_mid_body' : 'pass'),
      beforeForward: async (request) => {
        if (paid(request.headers) && downOnPaidCall) chainDown = true;
        if (!paid(request.headers) || mode !== 'hold' || !held) return;
        held.arrive();
        await held.released;
      },
    });
    rpc = await startFaultProxy({
      upstream: peers.rpcUrls[NETWORK]!,
      choose: () => (chainDown ? 'error5xx' : 'pass'),
    });
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString('utf8').split('\n'))
          if (line.trim() !== '') errors.push(JSON.parse(line) as Record<string, unknown>);
        done();
      },
    });
    t = await startTestService(
      { ...peersEnv(peers, [new URL(faults.url).host]), RPC_URL_POLYGON_AMOY: rpc.url },
      { resolver: tableResolver(), logger: pino({ level: 'error' }, sink) },
    );
    db = t.database.handle.db;
  } catch (error) {
    await faults?.close();
    await rpc?.close();
    await peers.stop();
    throw error;
  }
});

afterAll(async () => {
  held?.releaseNow();
  await ifStarted(t)?.stop();
  await faults?.close();
  await rpc?.close();
  await ifStarted(peers)?.stop();
});

/** The paid call held at the proxy until released (mode 'hold'). */
let held: { arrive: () => void; released: Promise<void>; releaseNow: () => void } | undefined;

function holdPaidCalls(): { arrived: Promise<void>; release: () => void } {
  let arrive: () => void = () => undefined;
  let releaseNow: () => void = () => undefined;
  const arrived = new Promise<void>((resolve) => (arrive = resolve));
  const released = new Promise<void>((resolve) => (releaseNow = resolve));
  held = { arrive, released, releaseNow };
  mode = 'hold';
  return { arrived, release: releaseNow };
}

const service = () => peers.wallets.service.evm.address;
const targetUrl = () => `${faults!.url}${new URL(peers.targets[TARGET]!.routes.paid.url).pathname}`;

async function scrape(): Promise<string> {
  const response = await t.client.get('/metrics');
  expect(response.status).toBe(200);
  return response.text;
}

function uptoFetch(key: Hex) {
  return wrapFetchWithPayment(contractFetch(), x402ClientV2(privateKeyToAccount(key), { upto: true }));
}

describe('/relay paid by upto, the target paid', () => {
  it.each([
    { when: 'the request reads it on the chain', unreadable: false },
    {
      when: "the chain cannot be read during the request: the watch job finds the target's settlement later",
      unreadable: true,
    },
  ])(
    "the target's answer cut after it settled, $when: the permit is settled for what it used plus the fee, once, before its deadline",
    async ({ unreadable }) => {
      mode = 'cut';
      downOnPaidCall = unreadable;
      const target = peers.targets[TARGET]!;
      target.reset();
      const payer = await newUptoPayer(peers, CLIENT_NETWORK);
      const before = {
        payer: await peers.usdcBalance(CLIENT_NETWORK, payer.address),
        ours: await peers.usdcBalance(CLIENT_NETWORK, service()),
        target: await peers.usdcBalance(NETWORK, target.routes.paid.payTo),
      };

      const res = await uptoFetch(payer.key)(
        `${t.service.url}/relay`,
        relayRequest({ api_url: targetUrl(), method: 'GET', network: CLIENT_NETWORK }),
      );

      chainDown = false;
      downOnPaidCall = false;
      expect(res.status, await res.clone().text()).toBe(502);
      const [row] = (await relayRows(db)).filter((candidate) => candidate.payer === payer.address);
      expect(row).toMatchObject({
        scheme: 'upto',
        maximum_atomic: atomicAmount(CLIENT_NETWORK, RELAY_UPTO_MAX_TOTAL).toString(),
      });
      const webhookId = res.headers.get('x-service-webhook');
      if (unreadable) {
        // Nothing known when the request answered: the permit is left to the watch job.
        expect(res.headers.get('x-client-payment')).toBeNull();
        expect(webhookId).not.toBeNull();
        const record = await pollWebhook(t, webhookId!, 30_000);
        expect(record.status, record.text).toBe(200);
        expect(record.body).toMatchObject({ status: 'no_refund_needed', relayTxId: Number(row!.id) });
      } else {
        expect(res.headers.get('x-client-payment')).toMatch(/^0x[0-9a-f]{64}$/);
        expect(webhookId).toBeNull();
      }

      const used = atomicAmount(NETWORK, UPTO_USED);
      expect({
        payer: await peers.usdcBalance(CLIENT_NETWORK, payer.address),
        ours: await peers.usdcBalance(CLIENT_NETWORK, service()),
        target: await peers.usdcBalance(NETWORK, target.routes.paid.payTo),
      }).toEqual({
        payer: before.payer - RELAY_UPTO_USED_TOTAL,
        ours: before.ours + RELAY_UPTO_USED_TOTAL,
        target: before.target + used,
      });
      const [final] = (await relayRows(db)).filter((candidate) => candidate.id === row!.id);
      expect(final).toMatchObject({
        state: 'delivered',
        settled_atomic: atomicAmount(CLIENT_NETWORK, RELAY_UPTO_USED_TOTAL).toString(),
        charged_micro: RELAY_UPTO_USED_TOTAL,
        target_used_micro: UPTO_USED,
        refund_micro: null,
      });
      expect(await db.selectFrom('refunds').selectAll().where('relay_transaction_id', '=', row!.id).execute()).toEqual(
        [],
      );
      // Settled before the permit's deadline: its block is no later than the deadline.
      const receipt = await peers.evmChains[CLIENT_NETWORK]!.publicClient.getTransactionReceipt({
        hash: final!.client_tx_hash as Hex,
      });
      const block = await peers.evmChains[CLIENT_NETWORK]!.publicClient.getBlock({ blockNumber: receipt.blockNumber });
      const permit = (final!.payment_payload as { payload: { permit2Authorization: { deadline: string } } }).payload
        .permit2Authorization;
      expect(block.timestamp).toBeLessThanOrEqual(BigInt(permit.deadline));
    },
  );

  it('the payer revokes its Permit2 allowance while our paid call is at the target: we bear the loss, logged, counted and recorded', async () => {
    const target = peers.targets[TARGET]!;
    target.reset();
    const payer = await newUptoPayer(peers, CLIENT_NETWORK);
    const before = {
      payer: await peers.usdcBalance(CLIENT_NETWORK, payer.address),
      ours: await peers.usdcBalance(CLIENT_NETWORK, service()),
      ourTargetSide: await peers.usdcBalance(NETWORK, service()),
      target: await peers.usdcBalance(NETWORK, target.routes.paid.payTo),
    };
    const metrics = await scrape();
    const { arrived, release } = holdPaidCalls();

    const paying = uptoFetch(payer.key)(
      `${t.service.url}/relay`,
      relayRequest({ api_url: targetUrl(), method: 'GET', network: CLIENT_NETWORK }),
    );
    await arrived;
    // The payer takes back Permit2's allowance while the target holds our payment.
    const chain = peers.evmChains[CLIENT_NETWORK]!;
    const revoke = await peers.evmWalletClient(CLIENT_NETWORK, payer.key).writeContract({
      address: getAddress(EVM_NETWORKS[CLIENT_NETWORK].usdc),
      abi: erc20,
      functionName: 'approve',
      args: [PERMIT2_ADDRESS, 0n],
      chain: chain.chain,
      account: privateKeyToAccount(payer.key),
    });
    expect((await chain.publicClient.waitForTransactionReceipt({ hash: revoke })).status).toBe('success');
    release();
    const res = await paying;
    mode = 'cut';

    // The target answered and was paid: its answer passes; nothing was taken from the payer.
    expect(res.status, await res.clone().text()).toBe(200);
    expect(res.headers.get('x-client-payment')).toBeNull();
    const used = atomicAmount(NETWORK, UPTO_USED);
    expect({
      payer: await peers.usdcBalance(CLIENT_NETWORK, payer.address),
      ours: await peers.usdcBalance(CLIENT_NETWORK, service()),
      ourTargetSide: await peers.usdcBalance(NETWORK, service()),
      target: await peers.usdcBalance(NETWORK, target.routes.paid.payTo),
    }).toEqual({
      payer: before.payer,
      ours: before.ours,
      ourTargetSide: before.ourTargetSide - used,
      target: before.target + used,
    });

    const [row] = (await relayRows(db)).filter((candidate) => candidate.payer === payer.address);
    expect(row).toMatchObject({
      state: 'settle_failed',
      scheme: 'upto',
      failure_reason: 'permit2_allowance_missing',
      client_tx_hash: null,
      charged_micro: RELAY_UPTO_USED_TOTAL,
      target_used_micro: UPTO_USED,
    });
    // The record says what happened.
    const webhookId = res.headers.get('x-service-webhook');
    expect(webhookId).toBe(row!.webhook_id);
    const record = await pollWebhook(t, webhookId!, 10_000);
    // A failed record answers 500 (as every failed record does), naming the failure.
    expect(record.status).toBe(500);
    expect(record.body).toMatchObject({
      status: 'failed',
      errorType: 'payment_failed',
      network: CLIENT_NETWORK,
      relayTxId: Number(row!.id),
    });
    expect(record.body.message).toContain('the target paid');
    expect(record.body.message).toContain('nothing was taken from you');
    expect(record.body.error).toMatch(/^permit2_allowance_missing: /);
    // An operator's line: the transaction, the payer, the network, the amount lost.
    expect(errors.filter((line) => line.relayTransactionId === String(row!.id))).toEqual([
      expect.objectContaining({
        msg: expect.stringContaining('upto charge lost'),
        payer: payer.address,
        network: CLIENT_NETWORK,
        amountLostMicroUsdc: String(RELAY_UPTO_USED_TOTAL),
        targetUsedMicroUsdc: String(UPTO_USED),
      }),
    ]);
    expect(growth(metrics, await scrape())(`prs_upto_charges_lost_total{network="${CLIENT_NETWORK}"}`)).toBe(1);
    // The maximum stays counted against the payer's daily limit: the loss a payer can cause is bounded.
    expect(
      await spentOn(db, {
        scope: 'relay_wallet',
        scopeId: payer.address,
        networkClass: 'testnet',
        day: utcDay(new Date()),
      }),
    ).toBe(RELAY_UPTO_MAX_TOTAL);
  });
});
