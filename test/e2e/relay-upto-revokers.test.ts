// /relay paid by upto against payers who revoke. The clients are unmodified @x402/fetch 2.27 with
// @x402/evm's upto scheme, paying on Base Sepolia from wallets of their own (each approves Permit2
// first, as x402 asks); the target is unmodified @x402/express asking upto on Polygon Amoy and
// settling 7,500 of its 20,000 micro-USDC maximum, made slow by a proxy that holds our paid calls.
// The service's bound on open upto maxima is 0.11 USDC: five permits of 20,600 (the maximum plus the
// fee), not six. Every money leg is read from the chain.
//   - A payer revokes its Permit2 allowance while the target is being called: the target is paid and
//     the charge is lost, once. Its next upto permit (allowance given again) is refused before
//     anything moves, with a 402 naming why that offers exact only.
//   - 20 fresh wallets pay upto at once: five are admitted (the open maxima stay within the bound,
//     shown by /metrics), the others are refused before anything moves; the five revoke and take
//     one call each, at most the bound in all, and are barred from upto.
import { decodePaymentRequiredHeader } from '@x402/core/http';
import { x402Client } from '@x402/core/client';
import { UptoEvmScheme } from '@x402/evm/upto/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { getAddress, parseAbi, type Address, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { startFaultProxy, type FaultProxy } from '../../devnet/faults';
import { atomicAmount, CAIP2_NETWORKS, EVM_NETWORKS, type EvmNetworkName, type Peers } from '../../devnet/index';
import { x402ClientV2 } from '../../devnet/peers/v2-client';
import { PERMIT2_ADDRESS } from '../../payments/chains/evm';
import { waitFor } from '../support/child-service';
import { growth, sample } from '../support/metrics';
import { peersEnv } from '../support/proxy';
import { contractFetch, relayRequest, relayRows } from '../support/relay';
import { tableResolver } from '../support/resolver';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';
import {
  approvePermit2AsOwner,
  newUptoPayer,
  RELAY_UPTO_MAX_TOTAL,
  RELAY_UPTO_USED_TOTAL,
  startUptoPeers,
  UPTO_USED,
} from '../support/upto';

const TARGET = 'upto-less-polygon-amoy';
const NETWORK: EvmNetworkName = 'polygon-amoy';
const CLIENT_NETWORK: EvmNetworkName = 'base-sepolia';
/** RELAY_UPTO_EXPOSURE_TOTAL_USDC of the service: room for five permits of 20,600, not six. */
const TOTAL_BOUND_MICRO = 110_000n;
const ADMITTED_AT_ONCE = 5;
const ATTACKERS = 20;
const erc20 = parseAbi(['function approve(address spender, uint256 amount) returns (bool)']);

let peers: Peers;
let t: TestService;
let db: Db;
/** In front of the target: holds our paid calls while `holding`, counting them. */
let faults: FaultProxy | undefined;
let holding = false;
let arrived = 0;
let gate = openGate();

function openGate(): { opened: Promise<void>; open: () => void } {
  let open: () => void = () => undefined;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

const paid = (headers: Record<string, unknown>) =>
  headers['payment-signature'] !== undefined || headers['x-payment'] !== undefined;

beforeAll(async () => {
  peers = await startUptoPeers(CLIENT_NETWORK, NETWORK, TARGET);
  try {
    faults = await startFaultProxy({
      upstream: peers.targets[TARGET]!.url,
      choose: () => 'pass',
      beforeForward: async (request) => {
        if (!paid(request.headers)) return;
        arrived += 1;
        if (holding) await gate.opened;
      },
    });
    t = await startTestService(
      {
        ...peersEnv(peers, [new URL(faults.url).host]),
        RELAY_UPTO_EXPOSURE_TOTAL_USDC: '0.11',
      },
      { resolver: tableResolver() },
    );
    db = t.database.handle.db;
  } catch (error) {
    await faults?.close();
    await peers.stop();
    throw error;
  }
});

afterAll(async () => {
  gate.open();
  await ifStarted(t)?.stop();
  await faults?.close();
  await ifStarted(peers)?.stop();
});

/** Our paid calls are held at the target until `release`. */
function holdPaidCalls(): { release: () => void } {
  gate = openGate();
  holding = true;
  return {
    release: () => {
      holding = false;
      gate.open();
    },
  };
}

const service = () => peers.wallets.service.evm.address;
const targetUrl = () => `${faults!.url}${new URL(peers.targets[TARGET]!.routes.paid.url).pathname}`;
const payTo = () => peers.targets[TARGET]!.routes.paid.payTo;
const relay = (key: Hex, fetcher = uptoFetch(key)) =>
  fetcher(`${t.service.url}/relay`, relayRequest({ api_url: targetUrl(), method: 'GET', network: CLIENT_NETWORK }));

/** A client that speaks upto (and exact, as x402ClientV2 registers both). */
function uptoFetch(key: Hex) {
  return wrapFetchWithPayment(contractFetch(), x402ClientV2(privateKeyToAccount(key), { upto: true }));
}

/** An attacker's client: upto only (an offer of exact only is not paid at all). */
function uptoOnlyFetch(key: Hex) {
  const client = new x402Client();
  client.register('eip155:*', new UptoEvmScheme(privateKeyToAccount(key)));
  client.setSpendControls({
    allowedAssets: [
      {
        network: CAIP2_NETWORKS[CLIENT_NETWORK],
        asset: getAddress(EVM_NETWORKS[CLIENT_NETWORK].usdc),
        maxAmountPerPayment: atomicAmount(CLIENT_NETWORK, 100_000n).toString(),
      },
    ],
  });
  return wrapFetchWithPayment(contractFetch(), client);
}

async function scrape(): Promise<string> {
  const response = await t.client.get('/metrics');
  expect(response.status).toBe(200);
  return response.text;
}

const exposureShown = async () => sample(await scrape(), 'prs_upto_exposure_micro_usdc{network_class="testnet"}');

/** The maxima of upto permits admitted and not yet settled or ended, from the rows themselves. */
async function openMaxima(): Promise<bigint> {
  const rows = await db
    .selectFrom('relay_transactions')
    .select('amount_micro')
    .where('scheme', '=', 'upto')
    .where('state', 'in', ['received', 'settling'])
    .execute();
  return rows.reduce((sum, row) => sum + row.amount_micro, 0n);
}

async function revoke(key: Hex): Promise<void> {
  const chain = peers.evmChains[CLIENT_NETWORK]!;
  const hash = await peers.evmWalletClient(CLIENT_NETWORK, key).writeContract({
    address: getAddress(EVM_NETWORKS[CLIENT_NETWORK].usdc),
    abi: erc20,
    functionName: 'approve',
    args: [PERMIT2_ADDRESS, 0n],
    chain: chain.chain,
    account: privateKeyToAccount(key),
  });
  expect((await chain.publicClient.waitForTransactionReceipt({ hash })).status).toBe('success');
}

async function ourBalances() {
  return {
    ours: await peers.usdcBalance(CLIENT_NETWORK, service()),
    ourTargetSide: await peers.usdcBalance(NETWORK, service()),
    target: await peers.usdcBalance(NETWORK, payTo()),
  };
}

const rowsOf = async (payer: Address) => (await relayRows(db)).filter((row) => row.payer === payer);
const used = () => atomicAmount(NETWORK, UPTO_USED);

describe('/relay paid by upto, payers who revoke', () => {
  it('a payer who revokes during the call is charged nothing once; its next upto permit is refused before anything moves and it is offered exact only', async () => {
    const payer = await newUptoPayer(peers, CLIENT_NETWORK);
    const before = { payer: await peers.usdcBalance(CLIENT_NETWORK, payer.address), ...(await ourBalances()) };
    const arrivedBefore = arrived;
    const { release } = holdPaidCalls();
    const paying = relay(payer.key);
    await waitFor('our paid call at the target', () => (arrived > arrivedBefore ? true : undefined), 60_000);
    // While the call runs its maximum is open, and shown.
    expect(await exposureShown()).toBe(Number(RELAY_UPTO_MAX_TOTAL));
    await revoke(payer.key);
    release();
    const res = await paying;

    // The call was made and the target paid; nothing was taken from the payer: one charge lost.
    expect(res.status, await res.clone().text()).toBe(200);
    expect(res.headers.get('x-client-payment')).toBeNull();
    const after = { payer: await peers.usdcBalance(CLIENT_NETWORK, payer.address), ...(await ourBalances()) };
    expect(after).toEqual({
      payer: before.payer,
      ours: before.ours,
      ourTargetSide: before.ourTargetSide - used(),
      target: before.target + used(),
    });
    const [lost] = await rowsOf(payer.address);
    expect(lost).toMatchObject({
      state: 'settle_failed',
      scheme: 'upto',
      failure_reason: 'permit2_allowance_missing',
      charged_micro: RELAY_UPTO_USED_TOTAL,
      upto_exposure_class: null,
    });
    expect(
      await db.selectFrom('upto_defaulted_payers').selectAll().where('payer', '=', payer.address).execute(),
    ).toEqual([expect.objectContaining({ relay_transaction_id: lost!.id, lost_micro: RELAY_UPTO_USED_TOTAL })]);
    expect(await exposureShown()).toBe(0);

    // It approves Permit2 again and pays again by upto: refused before anything moves.
    await approvePermit2AsOwner(peers, CLIENT_NETWORK, payer.key);
    const metrics = await scrape();
    const arrivedThen = arrived;
    const again = await relay(payer.key);
    expect(again.status).toBe(402);
    const body = (await again.clone().json()) as { code: string; error: string };
    expect(body.code).toBe('payment_invalid');
    expect(body.error).toMatch(/^upto_payer_defaulted: /);
    expect(body.error).toContain('pay by exact');
    const offered = decodePaymentRequiredHeader(again.headers.get('payment-required')!);
    expect(offered.accepts.length).toBeGreaterThan(0);
    expect(offered.accepts.map((entry) => entry.scheme)).not.toContain('upto');
    expect(growth(metrics, await scrape())('prs_upto_refusals_total{reason="payer_defaulted"}')).toBe(1);
    // Nothing moved: no row, no paid call to the target, every balance as it was.
    expect(await rowsOf(payer.address)).toHaveLength(1);
    expect(arrived).toBe(arrivedThen);
    expect({ payer: await peers.usdcBalance(CLIENT_NETWORK, payer.address), ...(await ourBalances()) }).toEqual(after);
  });

  it('20 fresh wallets pay upto at once against a slow target: the open maxima never exceed the total bound, the others are refused before anything moves', async () => {
    const payers: { key: Hex; address: Address }[] = [];
    for (let i = 0; i < ATTACKERS; i += 1) payers.push(await newUptoPayer(peers, CLIENT_NETWORK));
    const balancesOf = async () => Promise.all(payers.map(({ address }) => peers.usdcBalance(CLIENT_NETWORK, address)));
    const before = { payers: await balancesOf(), ...(await ourBalances()) };
    const metrics = await scrape();
    const arrivedBefore = arrived;
    const { release } = holdPaidCalls();

    let ended = 0;
    const attempts = payers.map(({ key }) =>
      relay(key, uptoOnlyFetch(key))
        .then(
          (response) => ({ response, error: undefined }),
          (error: unknown) => ({ response: undefined, error }),
        )
        .finally(() => (ended += 1)),
    );
    // Every attacker is either held at the target (admitted and paid for) or answered.
    await waitFor(
      'every attacker admitted or refused',
      () => (arrived - arrivedBefore + ended === ATTACKERS ? true : undefined),
      120_000,
    );
    const admitted = arrived - arrivedBefore;
    expect(admitted).toBe(ADMITTED_AT_ONCE);
    const open = await openMaxima();
    expect(open).toBe(BigInt(ADMITTED_AT_ONCE) * RELAY_UPTO_MAX_TOTAL);
    expect(open).toBeLessThanOrEqual(TOTAL_BOUND_MICRO);
    expect(await exposureShown()).toBe(Number(open));

    // The admitted (a refused permit leaves no row) revoke while the target is being called.
    const rows = (await relayRows(db)).filter((row) => payers.some(({ address }) => address === row.payer));
    expect(rows).toHaveLength(ADMITTED_AT_ONCE);
    for (const row of rows) await revoke(payers.find(({ address }) => address === row.payer)!.key);
    release();
    const results = await Promise.all(attempts);

    const answered = results.flatMap(({ response }) => (response ? [response] : []));
    expect(answered.filter((response) => response.status === 200)).toHaveLength(ADMITTED_AT_ONCE);
    // The others: a 402 refusing the permit at the bound, or no upto offered at all (the client found nothing to pay).
    const refusedAtBound: number[] = [];
    for (const response of answered.filter((candidate) => candidate.status !== 200)) {
      expect(response.status).toBe(402);
      const body = (await response.json()) as { code: string; error: string };
      expect(body).toMatchObject({ code: 'payment_invalid' });
      expect(body.error).toMatch(/^upto_exposure_exceeded: /);
      refusedAtBound.push(1);
    }
    expect(refusedAtBound.length + results.filter(({ error }) => error !== undefined).length).toBe(
      ATTACKERS - ADMITTED_AT_ONCE,
    );
    expect(growth(metrics, await scrape())('prs_upto_refusals_total{reason="total_exposure"}')).toBe(
      refusedAtBound.length,
    );

    // Money, from the chain: no attacker paid anything; the target was paid for five calls, by us.
    expect({ payers: await balancesOf(), ...(await ourBalances()) }).toEqual({
      payers: before.payers,
      ours: before.ours,
      ourTargetSide: before.ourTargetSide - BigInt(ADMITTED_AT_ONCE) * used(),
      target: before.target + BigInt(ADMITTED_AT_ONCE) * used(),
    });
    // What they took is within the bound, once: each of the five is barred from upto; nothing is open.
    expect(BigInt(ADMITTED_AT_ONCE) * UPTO_USED).toBeLessThanOrEqual(TOTAL_BOUND_MICRO);
    const barred = await db
      .selectFrom('upto_defaulted_payers')
      .select('payer')
      .where(
        'payer',
        'in',
        payers.map(({ address }) => address),
      )
      .execute();
    expect(barred.map(({ payer }) => payer).sort()).toEqual(rows.map(({ payer }) => payer).sort());
    expect(await openMaxima()).toBe(0n);
    expect(await exposureShown()).toBe(0);
  });
});
