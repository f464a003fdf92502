// Every kind of target paid through every endpoint, in one table: {EIP-3009 USDC on Polygon Amoy,
// Permit2 exact on Polygon Amoy, Permit2 exact on MegaETH (MegaUSD, 18 decimals), upto settling less
// than its maximum, upto settling its maximum} x {/proxy, /relay with an exact client, /relay with
// an upto-capable client, /proxy/sim, /relay/sim}. The targets are unmodified @x402/express 2.27
// settled by @x402/evm's facilitator; the clients are the unmodified x402-fetch 1.2 (exact only) and
// @x402/fetch 2.27 with @x402/evm's exact and upto schemes, paying on Base or Base Sepolia, never on
// the target's chain. Every cell reads each money leg from the chains and the ledger:
//  - the target's payTo received exactly what it settled, in its token's units, and our wallet on
//    the target's network paid exactly that, in one settlement whose transfers the receipt shows;
//  - /proxy: the credits held (the price, or the maximum, plus the fee), charged (what was settled
//    plus the fee on it) and released;
//  - /relay: what the client paid on its own network and what we received there, the client's
//    settlement read from its receipt, and for an exact client paying an upto target the unused
//    part and the fee on it refunded on that network; an upto-capable client is offered upto for an
//    upto target (we settle the used part plus the fee on it on its permit, nothing to refund) and
//    pays exact otherwise;
//  - the dry runs move nothing and show the priced figures and the pricing rule.
// Our wallet approves Permit2 once per token for all of it (recorded with its gas). The money of
// each cell is printed, and written as a markdown table to .tmp/pay-every-endpoint.md.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { decodePaymentSignatureHeader } from '@x402/core/http';
import { wrapFetchWithPayment as wrapFetchV2 } from '@x402/fetch';
import { formatUnits, getAddress, type Address } from 'viem';
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { EXACT_PERMIT2_PROXY_ADDRESS, UPTO_PERMIT2_PROXY_ADDRESS } from '../../devnet/evm/permit2';
import {
  atomicAmount,
  CAIP2_NETWORKS,
  EVM_NETWORKS,
  type EvmNetworkName,
  type Peers,
  type Target,
  type TargetOptions,
} from '../../devnet/index';
import { x402ClientV2 } from '../../devnet/peers/v2-client';
import { organisationBalance } from '../../payments/accounts/credits';
import { decodePaymentResponseHeader } from '../../payments/x402/headers';
import { createTestAccount } from '../support/accounts';
import { paidCallAfter } from '../support/paid-target';
import { ledgerSums, pollWebhook, startPeersAndProxyService } from '../support/proxy';
import { contractFetch, payingFetch, relayRequest, relayRows } from '../support/relay';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';
import {
  approvePermit2AsOwner,
  expectOurPermit2ApprovalOnce,
  RELAY_UPTO_MAX_TOTAL,
  RELAY_UPTO_USED_TOTAL,
  tokenTransfers,
  UPTO_MAXIMUM,
  UPTO_RESERVED_CREDITS,
  UPTO_USED,
  UPTO_USED_CREDITS,
} from '../support/upto';

const ROOT = path.resolve(import.meta.dirname, '../..');
/** The exact targets' price, in micro-USDC. */
const PRICE = 12_345n;
/** ceil(12,345 x 1.03 / 1000): the credits /proxy charges for it. */
const CREDITS = 13n;
/** ceil(12,345 x 1.03): what a /relay client pays for it. */
const RELAY_TOTAL = 12_716n;

type Via = 'eip3009' | 'permit2' | 'upto';

interface TargetKind {
  label: string;
  name: string;
  network: EvmNetworkName;
  /** Where a /relay client pays us: Base or Base Sepolia, of the target's network class. */
  clientNetwork: EvmNetworkName;
  offer: NonNullable<TargetOptions['v2Offer']>;
  via: Via;
  /** Its price, or the maximum of an upto target (micro-USDC). */
  price: bigint;
  /** What it settles of it. */
  settles: bigint;
  /** /proxy: the credits held, and charged once the chain shows what was settled. */
  reservedCredits: bigint;
  chargedCredits: bigint;
  /** /relay: what an exact client pays us first, and in the end (the rest refunded). */
  relayTaken: bigint;
  relayCharged: bigint;
}

const EXACT_FIGURES = {
  price: PRICE,
  settles: PRICE,
  reservedCredits: CREDITS,
  chargedCredits: CREDITS,
  relayTaken: RELAY_TOTAL,
  relayCharged: RELAY_TOTAL,
};

const TARGETS: TargetKind[] = [
  {
    label: 'EIP-3009 USDC on polygon-amoy',
    name: 'eip3009-polygon-amoy',
    network: 'polygon-amoy',
    clientNetwork: 'base-sepolia',
    offer: { scheme: 'exact' },
    via: 'eip3009',
    ...EXACT_FIGURES,
  },
  {
    label: 'Permit2 exact on polygon-amoy',
    name: 'permit2-polygon-amoy',
    network: 'polygon-amoy',
    clientNetwork: 'base-sepolia',
    offer: { scheme: 'exact', assetTransferMethod: 'permit2' },
    via: 'permit2',
    ...EXACT_FIGURES,
  },
  {
    label: 'Permit2 exact on megaeth (18 decimals)',
    name: 'permit2-megaeth',
    network: 'megaeth',
    clientNetwork: 'base',
    offer: { scheme: 'exact', assetTransferMethod: 'permit2' },
    via: 'permit2',
    ...EXACT_FIGURES,
  },
  {
    label: 'upto settling less than its maximum, on polygon-amoy',
    name: 'upto-less-polygon-amoy',
    network: 'polygon-amoy',
    clientNetwork: 'base-sepolia',
    offer: { scheme: 'upto', uptoChargeMicroUsdc: UPTO_USED },
    via: 'upto',
    price: UPTO_MAXIMUM,
    settles: UPTO_USED,
    reservedCredits: UPTO_RESERVED_CREDITS,
    chargedCredits: UPTO_USED_CREDITS,
    relayTaken: RELAY_UPTO_MAX_TOTAL,
    relayCharged: RELAY_UPTO_USED_TOTAL,
  },
  {
    label: 'upto settling its maximum, on megaeth (18 decimals)',
    name: 'upto-max-megaeth',
    network: 'megaeth',
    clientNetwork: 'base',
    offer: { scheme: 'upto', uptoChargeMicroUsdc: UPTO_MAXIMUM },
    via: 'upto',
    price: UPTO_MAXIMUM,
    settles: UPTO_MAXIMUM,
    reservedCredits: UPTO_RESERVED_CREDITS,
    chargedCredits: UPTO_RESERVED_CREDITS,
    relayTaken: RELAY_UPTO_MAX_TOTAL,
    relayCharged: RELAY_UPTO_MAX_TOTAL,
  },
];

const MODES = ['/proxy', '/relay, exact client', '/relay, upto-capable client', '/proxy/sim', '/relay/sim'] as const;
type Mode = (typeof MODES)[number];

/** The contract each kind of settlement calls: the token (EIP-3009) or a Permit2 proxy. */
const SETTLED_THROUGH: Record<Via, (network: EvmNetworkName) => Address> = {
  eip3009: (network) => getAddress(EVM_NETWORKS[network].usdc),
  permit2: () => EXACT_PERMIT2_PROXY_ADDRESS,
  upto: () => UPTO_PERMIT2_PROXY_ADDRESS,
};

let peers: Peers;
let t: TestService;
let db: Db;
/** The @x402/fetch client with the upto scheme, on a key of its own (Permit2 approved on Base and Base Sepolia). */
let uptoClient: PrivateKeyAccount;

beforeAll(async () => {
  ({ peers, t, db } = await startPeersAndProxyService({
    networks: ['base', 'base-sepolia', 'megaeth', 'polygon-amoy'],
    targets: TARGETS.map(({ name, network, offer, price }) => ({
      name,
      network,
      x402Version: 2 as const,
      v2Offer: offer,
      // An upto target settles at most its price on each of its paid routes.
      pricesMicroUsdc: { paid: price, paidEcho: price, neverSettles: price, error: price, slow: price },
    })),
  }));
  const privateKey = generatePrivateKey();
  uptoClient = privateKeyToAccount(privateKey);
  for (const network of ['base', 'base-sepolia'] as const) {
    await peers.mint(network, uptoClient.address, 1_000_000n);
    // As its owner would, once: x402 asks an upto payer to have approved Permit2 on the token.
    await approvePermit2AsOwner(peers, network, privateKey);
  }
});

/** The money of each cell, as the chain and the ledger showed it. */
interface MoneyRow {
  target: string;
  mode: Mode;
  payTo: string;
  ourTargetLeg: string;
  client: string;
  ourClientLeg: string;
  refund: string;
  credits: string;
  priced: string;
  result: 'passes' | 'FAILS';
}
const ROWS: MoneyRow[] = [];

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
  const header = [
    '| Target | Endpoint | Target payTo received | Our wallet, target network | Client paid, its network | We received, client network | Refunded to client | Credits held / charged / released | Priced (dry runs) | Result |',
    '|---|---|---|---|---|---|---|---|---|---|',
  ];
  const lines = ROWS.map(
    (row) =>
      `| ${row.target} | ${row.mode} | ${row.payTo} | ${row.ourTargetLeg} | ${row.client} | ${row.ourClientLeg} | ${row.refund} | ${row.credits} | ${row.priced} | ${row.result} |`,
  );
  const table = [...header, ...lines].join('\n');
  console.log(`\nMoney on every leg, per cell:\n${table}\n`);
  mkdirSync(path.join(ROOT, '.tmp'), { recursive: true });
  writeFileSync(path.join(ROOT, '.tmp', 'pay-every-endpoint.md'), `${table}\n`);
});

const us = () => peers.wallets.service.evm.address;

/** An amount of the network's stablecoin in its own units, signed, with its network. */
function money(network: EvmNetworkName, atomic: bigint): string {
  const { decimals, symbol } = EVM_NETWORKS[network];
  const sign = atomic > 0n ? '+' : atomic < 0n ? '-' : '';
  const magnitude = atomic < 0n ? -atomic : atomic;
  return `${sign}${formatUnits(magnitude, decimals)} ${symbol} (${atomic} on ${network})`;
}
const usdc = (micro: bigint) => formatUnits(micro, 6);

/** The four balances of a cell: our wallet and the payTo on the target's network, the client and us on the client's. */
async function legs(kind: TargetKind, target: Target, client: Address) {
  return {
    ourTargetLeg: await peers.usdcBalance(kind.network, us()),
    payTo: await peers.usdcBalance(kind.network, target.routes.paid.payTo),
    client: await peers.usdcBalance(kind.clientNetwork, client),
    ourClientLeg: await peers.usdcBalance(kind.clientNetwork, us()),
  };
}
type Legs = Awaited<ReturnType<typeof legs>>;
function moved(before: Legs, after: Legs): Legs {
  return {
    ourTargetLeg: after.ourTargetLeg - before.ourTargetLeg,
    payTo: after.payTo - before.payTo,
    client: after.client - before.client,
    ourClientLeg: after.ourClientLeg - before.ourClientLeg,
  };
}

/**
 * The paid call the target saw after `unpaidCalls` unpaid ones: our version 2 payment, for its price
 * (or maximum) in its token's units, to its payTo, by the method it asked for.
 */
function expectOurPaymentToTarget(kind: TargetKind, target: Target, unpaidCalls: number): void {
  const payment = decodePaymentSignatureHeader(paidCallAfter(target, unpaidCalls).payment!);
  const amount = atomicAmount(kind.network, kind.price).toString();
  const payTo = getAddress(target.routes.paid.payTo);
  const token = getAddress(EVM_NETWORKS[kind.network].usdc);
  expect(payment.x402Version).toBe(2);
  const payload = payment.payload as Record<string, Record<string, unknown>>;
  if (kind.via === 'eip3009') {
    expect(payment.accepted).toMatchObject({ scheme: 'exact', amount });
    const authorization = payload.authorization!;
    expect([getAddress(authorization.from as string), getAddress(authorization.to as string)]).toEqual([us(), payTo]);
    expect(authorization.value).toBe(amount);
    return;
  }
  expect(payment.accepted).toMatchObject(
    kind.via === 'permit2'
      ? { scheme: 'exact', amount, extra: { assetTransferMethod: 'permit2' } }
      : { scheme: 'upto', amount },
  );
  expect(payload.permit2Authorization).toMatchObject({
    from: us(),
    spender: SETTLED_THROUGH[kind.via](kind.network),
    permitted: { token, amount },
    witness: {
      to: payTo,
      validAfter: '0',
      // An upto permit names the only facilitator that may settle it: the target's.
      ...(kind.via === 'upto' ? { facilitator: getAddress(peers.facilitatorV2.evmAddress) } : {}),
    },
  });
}

/**
 * Our receipt of our payment to the target (X-Payment-Response): a success on its network; its
 * transaction moved exactly what the target settled from our wallet to its payTo, and nothing else
 * of the token. Returns the transaction.
 */
async function expectTargetSettlement(kind: TargetKind, target: Target, headers: Headers): Promise<string> {
  const receipt = decodePaymentResponseHeader(headers.get('x-payment-response'));
  const settled = atomicAmount(kind.network, kind.settles);
  expect(receipt).toMatchObject({
    ok: true,
    value: {
      success: true,
      network: kind.network,
      payer: us(),
      ...(kind.via === 'upto' ? { amount: settled.toString() } : {}),
    },
  });
  const transaction = receipt.ok ? receipt.value.transaction : '';
  expect(await tokenTransfers(peers, kind.network, transaction, SETTLED_THROUGH[kind.via](kind.network))).toEqual([
    { from: us(), to: getAddress(target.routes.paid.payTo), value: settled },
  ]);
  return transaction;
}

/** Runs a cell, recording its money row (FAILS until every assertion of the cell passed) and printing it. */
async function cell(kind: TargetKind, mode: Mode, run: (row: MoneyRow) => Promise<void>): Promise<void> {
  const row: MoneyRow = {
    target: kind.label,
    mode,
    payTo: '-',
    ourTargetLeg: '-',
    client: '-',
    ourClientLeg: '-',
    refund: '-',
    credits: '-',
    priced: '-',
    result: 'FAILS',
  };
  ROWS.push(row);
  try {
    await run(row);
    row.result = 'passes';
  } finally {
    console.log(
      `[${row.result}] ${kind.label} | ${mode} | payTo ${row.payTo} | our wallet ${row.ourTargetLeg} | client ${row.client} | we received ${row.ourClientLeg} | refund ${row.refund} | credits ${row.credits} | priced ${row.priced}`,
    );
  }
}

function recordLegs(row: MoneyRow, kind: TargetKind, delta: Legs): void {
  row.payTo = money(kind.network, delta.payTo);
  row.ourTargetLeg = money(kind.network, delta.ourTargetLeg);
  row.client = money(kind.clientNetwork, delta.client);
  row.ourClientLeg = money(kind.clientNetwork, delta.ourClientLeg);
}

async function proxyCell(kind: TargetKind, target: Target, row: MoneyRow): Promise<void> {
  const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
  const before = await legs(kind, target, us());

  const res = await t.client.post(
    '/proxy',
    { api_url: target.routes.paid.url, method: 'GET' },
    { headers: { 'x-api-key': key } },
  );

  const delta = moved(before, await legs(kind, target, us()));
  recordLegs(row, kind, delta);
  const sums = await ledgerSums(db, organisationId);
  row.credits = `${sums.reserve} / ${sums.charge} / ${sums.release}`;
  row.client = '-';
  row.ourClientLeg = '-';
  expect(res.status, res.text).toBe(200);
  expect(res.body).toEqual({ ok: true, route: 'paid', target: kind.name, network: kind.network });
  expectOurPaymentToTarget(kind, target, 1);
  const transaction = await expectTargetSettlement(kind, target, res.headers);
  const settled = atomicAmount(kind.network, kind.settles);
  expect(delta).toEqual({ ourTargetLeg: -settled, payTo: settled, client: 0n, ourClientLeg: 0n });
  // The credits of the price (or maximum) plus the fee held; what was settled plus the fee on it charged; the rest released.
  expect(res.headers.get('x-credits-charged')).toBe(kind.chargedCredits.toString());
  expect(await organisationBalance(db, organisationId)).toBe(1_000n - kind.chargedCredits);
  expect(sums).toEqual({
    grant: 1_000n,
    reserve: kind.reservedCredits,
    charge: kind.chargedCredits,
    release: kind.reservedCredits - kind.chargedCredits,
    refund: 0n,
  });
  const rows = await db
    .selectFrom('proxy_payments')
    .selectAll()
    .where('organisation_id', '=', organisationId)
    .execute();
  expect(rows).toMatchObject([
    {
      state: 'charged',
      scheme: kind.via === 'upto' ? 'upto' : 'exact',
      network: kind.network,
      tx_hash: transaction,
      amount_micro_usdc: kind.settles,
      credits: kind.chargedCredits,
      ...(kind.via === 'upto' ? { max_amount_micro_usdc: kind.price, reserved_credits: kind.reservedCredits } : {}),
    },
  ]);
}

/** fetch for @x402/fetch: every answer checked against the document, every PAYMENT-SIGNATURE it sends kept. */
function recordingFetch(sent: string[]): typeof fetch {
  const checked = contractFetch();
  return async (input, init) => {
    const request = new Request(input, init);
    const signature = request.headers.get('payment-signature');
    if (signature !== null) sent.push(signature);
    return checked(request);
  };
}

async function relayCell(
  kind: TargetKind,
  target: Target,
  row: MoneyRow,
  clientKind: 'exact' | 'upto-capable',
): Promise<void> {
  const client = clientKind === 'exact' ? peers.wallets.client.evm.address : uptoClient.address;
  const sent: string[] = [];
  // x402-fetch 1.2 pays exact only; @x402/fetch 2.27 with the upto scheme pays upto where it is offered.
  const paying =
    clientKind === 'exact'
      ? payingFetch(peers, kind.clientNetwork)
      : wrapFetchV2(recordingFetch(sent), x402ClientV2(uptoClient, { upto: true }));
  // The client pays by upto only for an upto target; it then pays what was used plus the fee on it, nothing to refund.
  const paysByUpto = clientKind === 'upto-capable' && kind.via === 'upto';
  const taken = paysByUpto ? kind.relayCharged : kind.relayTaken;
  const refund = taken - kind.relayCharged;
  const before = await legs(kind, target, client);

  const res = await paying(
    `${t.service.url}/relay`,
    relayRequest({ api_url: target.routes.paid.url, method: 'GET', network: kind.clientNetwork }),
  );

  const answer: unknown = await res.json();
  const refundRecord = res.headers.get('x-refund-webhook-id');
  // The unused part and the fee on it come back by the refund job, on the client's own network.
  const refunded = refundRecord === null ? undefined : await pollWebhook(t, refundRecord, 30_000);
  const delta = moved(before, await legs(kind, target, client));
  recordLegs(row, kind, delta);
  const clientTx = res.headers.get('x-client-payment')!;
  const [relay] = (await relayRows(db)).filter((candidate) => candidate.client_tx_hash === clientTx);
  const refunds = relay
    ? await db.selectFrom('refunds').selectAll().where('relay_transaction_id', '=', relay.id).execute()
    : [];
  row.refund =
    refunds.length === 0
      ? 'none'
      : refunds
          .map((entry) => money(kind.clientNetwork, atomicAmount(kind.clientNetwork, entry.amount_micro)))
          .join(', ');

  expect(res.status).toBe(200);
  expect(answer).toEqual({ ok: true, route: 'paid', target: kind.name, network: kind.network });
  expectOurPaymentToTarget(kind, target, 2);
  await expectTargetSettlement(kind, target, res.headers);
  // Each leg on its own chain: the target got what it settled from our wallet; the client paid, in the end, what
  // it settled plus the fee on it, which we received.
  const settled = atomicAmount(kind.network, kind.settles);
  const charged = atomicAmount(kind.clientNetwork, kind.relayCharged);
  expect(delta).toEqual({ ourTargetLeg: -settled, payTo: settled, client: -charged, ourClientLeg: charged });
  if (clientKind === 'upto-capable') {
    // It paid once, by the scheme we offer for this target, and is answered in version 2 with its own receipt.
    expect(sent).toHaveLength(1);
    expect(decodePaymentSignatureHeader(sent[0]!).accepted).toMatchObject({
      scheme: paysByUpto ? 'upto' : 'exact',
      network: CAIP2_NETWORKS[kind.clientNetwork],
    });
    const own = JSON.parse(Buffer.from(res.headers.get('payment-response')!, 'base64').toString('utf8'));
    expect(own).toMatchObject({
      success: true,
      network: CAIP2_NETWORKS[kind.clientNetwork],
      payer: client,
      transaction: clientTx,
    });
  }
  // The client's settlement (X-Client-Payment): exactly what was taken, from the client to our wallet.
  expect(
    await tokenTransfers(
      peers,
      kind.clientNetwork,
      clientTx,
      paysByUpto ? UPTO_PERMIT2_PROXY_ADDRESS : SETTLED_THROUGH.eip3009(kind.clientNetwork),
    ),
  ).toEqual([{ from: client, to: us(), value: atomicAmount(kind.clientNetwork, taken) }]);
  expect(relay).toMatchObject({
    state: refund > 0n ? 'refunded' : 'delivered',
    target_network: kind.network,
    target_amount_micro: kind.price,
    ...(paysByUpto ? {} : { amount_micro: taken }),
    ...(kind.via === 'upto'
      ? {
          target_scheme: 'upto',
          target_used_micro: kind.settles,
          charged_micro: kind.relayCharged,
          refund_micro: refund > 0n ? refund : null,
        }
      : {}),
  });
  expect(
    refunds.map(({ status, amount_micro, network, recipient }) => ({ status, amount_micro, network, recipient })),
  ).toEqual(
    refund > 0n ? [{ status: 'confirmed', amount_micro: refund, network: kind.clientNetwork, recipient: client }] : [],
  );
  if (refund > 0n) {
    expect(refunded?.status, refunded?.text).toBe(200);
    expect(refunded!.body).toMatchObject({ status: 'refund_confirmed', network: kind.clientNetwork });
    expect(
      await tokenTransfers(
        peers,
        kind.clientNetwork,
        refunds[0]!.tx_hash!,
        SETTLED_THROUGH.eip3009(kind.clientNetwork),
      ),
    ).toEqual([{ from: us(), to: client, value: atomicAmount(kind.clientNetwork, refund) }]);
  } else {
    expect(refundRecord).toBeNull();
  }
}

/** A dry run: the target called once unpaid, nothing moved on its network. */
async function untouched<T>(kind: TargetKind, target: Target, row: MoneyRow, run: () => Promise<T>): Promise<T> {
  const before = await legs(kind, target, us());
  const result = await run();
  const delta = moved(before, await legs(kind, target, us()));
  row.payTo = money(kind.network, delta.payTo);
  row.ourTargetLeg = money(kind.network, delta.ourTargetLeg);
  expect(target.requests.map((request) => request.payment)).toEqual([null]);
  expect(delta).toEqual({ ourTargetLeg: 0n, payTo: 0n, client: 0n, ourClientLeg: 0n });
  return result;
}

const PROXY_RULES = {
  exact:
    'exact: the target takes its price of 0.012345 USDC; the account is charged 13 credits (the price plus the 3% fee)',
  upto: 'upto: the target settles what the call uses, at most 0.02 USDC; 21 credits (the maximum plus the 3% fee) are held, the account is charged what the target settles plus the fee on it, and the rest is released',
};
const RELAY_RULES = {
  exact: 'exact: the target takes its price of 0.012345 USDC; you pay 0.012716 USDC (the price plus the fee)',
  upto: 'upto: the target settles what the call uses, at most 0.02 USDC; you pay at most 0.0206 USDC (the maximum plus the fee) and are charged what the target settles plus the fee on it: paying by upto, only that is taken; paying by exact, the rest is refunded to you on the network you paid on',
};
const schemeOf = (kind: TargetKind) => (kind.via === 'upto' ? 'upto' : 'exact');

async function proxySimCell(kind: TargetKind, target: Target, row: MoneyRow): Promise<void> {
  const { key, organisationId } = await createTestAccount(db, { credits: 100n });

  const res = await untouched(kind, target, row, () =>
    t.client.post('/proxy/sim', { api_url: target.routes.paid.url, method: 'GET' }, { headers: { 'x-api-key': key } }),
  );

  const body = res.body as { feeBreakdown?: { totalCredits?: number }; pricing?: { rule?: string } };
  row.priced = `${body.feeBreakdown?.totalCredits} credits; ${body.pricing?.rule}`;
  const sums = await ledgerSums(db, organisationId);
  row.credits = `${sums.reserve} / ${sums.charge} / ${sums.release}`;
  expect(res.status, res.text).toBe(200);
  expect(res.body).toMatchObject({
    requiresPayment: true,
    status: 402,
    paymentRequirements: {
      scheme: schemeOf(kind),
      network: kind.network,
      maxAmountRequired: atomicAmount(kind.network, kind.price).toString(),
    },
    feeBreakdown: { targetAmount: Number(usdc(kind.price)), totalCredits: Number(kind.reservedCredits) },
    pricing: {
      scheme: schemeOf(kind),
      ...(kind.via === 'upto'
        ? {
            maxTargetAmount: Number(usdc(kind.price)),
            maxTotalAmount: Number(usdc(kind.relayTaken)),
            maxTotalCredits: Number(kind.reservedCredits),
          }
        : {}),
    },
  });
  expect(body.pricing!.rule).toBe(PROXY_RULES[schemeOf(kind)]);
  expect(sums).toMatchObject({ reserve: 0n, charge: 0n, release: 0n });
}

async function relaySimCell(kind: TargetKind, target: Target, row: MoneyRow): Promise<void> {
  const res = await untouched(kind, target, row, () =>
    t.client.post('/relay/sim', { api_url: target.routes.paid.url, method: 'GET', network: kind.clientNetwork }),
  );

  const body = res.body as { relayFeeBreakdown?: { totalAmount?: number }; pricing?: { rule?: string } };
  row.priced = `${body.relayFeeBreakdown?.totalAmount} USDC; ${body.pricing?.rule}`;
  expect(res.status, res.text).toBe(200);
  expect(res.body).toMatchObject({
    requiresPayment: true,
    targetPaymentRequirements: {
      scheme: schemeOf(kind),
      network: kind.network,
      maxAmountRequired: atomicAmount(kind.network, kind.price).toString(),
    },
    relayFeeBreakdown: { targetAmount: Number(usdc(kind.price)), totalAmount: Number(usdc(kind.relayTaken)) },
    pricing: {
      scheme: schemeOf(kind),
      ...(kind.via === 'upto'
        ? { maxTargetAmount: Number(usdc(kind.price)), maxTotalAmount: Number(usdc(kind.relayTaken)) }
        : {}),
    },
  });
  expect(body.pricing!.rule).toBe(RELAY_RULES[schemeOf(kind)]);
}

describe.each(TARGETS)('$label', (kind) => {
  it.each(MODES)('%s: every money leg as the chain and the ledger show it', async (mode) => {
    const target = peers.targets[kind.name]!;
    target.reset();
    await cell(kind, mode, (row) => {
      switch (mode) {
        case '/proxy':
          return proxyCell(kind, target, row);
        case '/relay, exact client':
          return relayCell(kind, target, row, 'exact');
        case '/relay, upto-capable client':
          return relayCell(kind, target, row, 'upto-capable');
        case '/proxy/sim':
          return proxySimCell(kind, target, row);
        case '/relay/sim':
          return relaySimCell(kind, target, row);
      }
    });
  });
});

describe.each(['polygon-amoy', 'megaeth'] as const)('our wallet paying through Permit2 on %s', (network) => {
  it('approved Permit2 once for all the payments above (one on-chain approval, recorded with its gas), never again', async () => {
    expect(TARGETS.filter((kind) => kind.network === network && kind.via !== 'eip3009').length).toBeGreaterThan(1);
    await expectOurPermit2ApprovalOnce(peers, db, network);
  });
});
