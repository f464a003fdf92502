// Solana offers that cannot be paid, refused by name before anything is signed or moved, in the
// dry runs already. Targets on the local cluster, in x402 version 1 (x402-express 1.2) and 2
// (@x402/express 2.27 with @x402/svm, settled by @x402/svm's facilitator):
// - a payTo without a token account for USDC: x402's clients (@x402/svm's ExactSvmScheme, x402
//   1.2) transfer into the payTo's associated account and never create it, and the facilitators
//   refuse such a payment, so we answer 422 `pay_to_account_missing`; once the payTo opens its
//   account the same target is paid;
// - an offer in a mint that is not the USDC we hold on the cluster: 422 `asset_unsupported`, naming
//   the mint.
// Every answer is checked against the document (contract client, contractFetch under x402-fetch);
// the money is read from the ledger.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { CAIP2_NETWORKS, startPeers, type Peers, type Target } from '../../devnet/index';
import { generateSolanaKey } from '../../devnet/svm/keys';
import { organisationBalance } from '../../payments/accounts/credits';
import { createTestAccount } from '../support/accounts';
import { startProxyService } from '../support/proxy';
import { payingFetch, relayRequest, relayRows } from '../support/relay';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'solana-devnet' as const;
const PRICE = 10_000n;
/** ceil(10,000 x 1.03 / 1000) credits: what /proxy charges once the target can be paid. */
const CREDITS = 11n;
const VERSIONS = [1, 2] as const;

let peers: Peers;
let t: TestService;
let db: Db;
/** The payTo of each version's target without a token account: fresh wallets, as a new seller's is. */
const bareWallets: Record<(typeof VERSIONS)[number], string> = { 1: '', 2: '' };
/** A mint that is not the cluster's USDC. */
let otherMint: string;

const bare = (version: 1 | 2): Target => peers.targets[`bare-v${version}`]!;
const otherToken = (version: 1 | 2): Target => peers.targets[`other-mint-v${version}`]!;
const service = () => peers.wallets.service.solana.address;
const client = () => peers.wallets.client.solana.address;

beforeAll(async () => {
  const [v1, v2, mint] = await Promise.all([generateSolanaKey(), generateSolanaKey(), generateSolanaKey()]);
  bareWallets[1] = v1.address;
  bareWallets[2] = v2.address;
  otherMint = mint.address;
  peers = await startPeers({
    networks: [NETWORK],
    pricesMicroUsdc: { paid: PRICE },
    targets: [
      ...VERSIONS.map((version) => ({
        name: `bare-v${version}`,
        network: NETWORK,
        x402Version: version,
        payTo: bareWallets[version],
        openPayToAccounts: false,
      })),
      ...VERSIONS.map((version) => ({
        name: `other-mint-v${version}`,
        network: NETWORK,
        x402Version: version,
        solanaMint: otherMint,
      })),
    ],
  });
  t = await startProxyService(peers);
  db = t.database.handle.db;
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

/** Every USDC balance of the cluster these calls could touch, and the facilitators' calls so far. */
async function snapshot() {
  const owners = [service(), client(), peers.wallets.target.solana.address, ...Object.values(bareWallets)];
  return {
    usdc: await Promise.all(owners.map((owner) => peers.usdcBalance(NETWORK, owner))),
    lamports: await peers.nativeBalance(NETWORK, service()),
    facilitatorCalls: peers.facilitator.calls.length,
    facilitatorV2Calls: peers.facilitatorV2.calls.length,
    relayRows: (await relayRows(db)).length,
  };
}

/** The target's paid route was only ever asked unpaid. */
function onlyUnpaidCalls(target: Target, count: number): void {
  const seen = target.requests.filter((request) => request.route === 'paid');
  expect(seen.map((request) => ({ payment: request.payment, status: request.status }))).toEqual(
    Array(count).fill({ payment: null, status: 402 }),
  );
}

async function proxyCall(path: '/proxy' | '/proxy/sim', target: Target, key: string) {
  return t.client.post(path, { api_url: target.routes.paid.url, method: 'GET' }, { headers: { 'x-api-key': key } });
}

async function proxyPayments(organisationId: bigint) {
  return db.selectFrom('proxy_payments').selectAll().where('organisation_id', '=', organisationId).execute();
}

describe('a Solana payTo without a USDC account, paid by a standard client directly', () => {
  it("is what @x402/svm's own client meets: it transfers into the missing account, @x402/svm's facilitator refuses it, and /relay/sim says so first", async () => {
    bare(2).reset();
    const before = await snapshot();

    const sim = await t.client.post('/relay/sim', { api_url: bare(2).routes.paid.url, method: 'GET' });
    const calls = peers.facilitatorV2.calls.length;
    const res = await peers.x402FetchV2({ solana: true })(bare(2).routes.paid.url);

    expect(sim.status, sim.text).toBe(422);
    expect(sim.body).toMatchObject({ code: 'pay_to_account_missing' });
    expect(res.status).toBe(402);
    const verifications = peers.facilitatorV2.calls.slice(calls);
    expect(verifications.map((call) => ({ path: call.path, answer: call.answer }))).toEqual([
      {
        path: '/verify',
        // The TransferChecked (instruction 2) fails: its destination is no token account.
        answer: expect.objectContaining({
          isValid: false,
          invalidReason: 'invalid_exact_svm_transaction_simulation_failed',
          invalidMessage: expect.stringContaining('"InstructionError":["2","InvalidAccountData"]'),
        }),
      },
    ]);
    expect(verifications[0]!.payment.accepted).toMatchObject({
      network: CAIP2_NETWORKS[NETWORK],
      payTo: bareWallets[2],
    });
    expect({ ...(await snapshot()), facilitatorV2Calls: before.facilitatorV2Calls }).toEqual(before);
  });
});

describe.each(VERSIONS)('a Solana target in x402 version %i whose payTo has no USDC account', (version) => {
  const target = () => bare(version);
  const accountDetails = () =>
    expect.stringContaining(
      `payTo ${bareWallets[version]} has no token account for ${peers.solanaLedgers[NETWORK]!.mint} on ${NETWORK}`,
    );

  it('/proxy/sim and /relay/sim refuse it with 422 pay_to_account_missing; nothing is signed or moved', async () => {
    target().reset();
    const { key } = await createTestAccount(db, { credits: 1_000n });
    const before = await snapshot();

    const proxySim = await proxyCall('/proxy/sim', target(), key);
    const relaySim = await t.client.post('/relay/sim', { api_url: target().routes.paid.url, method: 'GET' });

    for (const res of [proxySim, relaySim]) {
      expect(res.status, res.text).toBe(422);
      expect(res.body).toEqual({
        code: 'pay_to_account_missing',
        error: 'Unprocessable Content',
        details: accountDetails(),
      });
    }
    onlyUnpaidCalls(target(), 2);
    expect(await snapshot()).toEqual(before);
  });

  it('/relay refuses it with 422 instead of asking the client to pay: x402-fetch pays nothing', async () => {
    target().reset();
    const before = await snapshot();

    const res = await payingFetch(peers, NETWORK)(
      `${t.service.url}/relay`,
      relayRequest({ api_url: target().routes.paid.url, method: 'GET' }),
    );

    expect(res.status).toBe(422);
    expect(await res.json()).toMatchObject({ code: 'pay_to_account_missing', details: accountDetails() });
    expect(res.headers.get('x-client-payment')).toBeNull();
    onlyUnpaidCalls(target(), 1);
    expect(await snapshot()).toEqual(before);
  });

  it('/proxy refuses it with 422 before signing, nothing held or moved; once the payTo opens its account, /proxy pays it', async () => {
    target().reset();
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const before = await snapshot();

    const refused = await proxyCall('/proxy', target(), key);

    expect(refused.status, refused.text).toBe(422);
    expect(refused.body).toMatchObject({ code: 'pay_to_account_missing', details: accountDetails() });
    onlyUnpaidCalls(target(), 1);
    expect(await organisationBalance(db, organisationId)).toBe(1_000n);
    expect(await proxyPayments(organisationId)).toEqual([]);
    expect(await snapshot()).toEqual(before);

    // The check reads the chain at each call: the same target, once its payTo holds an account, is paid.
    await peers.createUsdcAccount(NETWORK, bareWallets[version]);
    const sim = await proxyCall('/proxy/sim', target(), key);
    expect(sim.status, sim.text).toBe(200);
    expect(sim.body).toMatchObject({
      requiresPayment: true,
      paymentRequirements: { network: NETWORK, payTo: bareWallets[version], maxAmountRequired: PRICE.toString() },
    });
    const paid = await proxyCall('/proxy', target(), key);

    expect(paid.status, paid.text).toBe(200);
    expect(paid.body).toMatchObject({ ok: true, route: 'paid', target: target().name });
    expect(await peers.usdcBalance(NETWORK, bareWallets[version])).toBe(PRICE);
    expect(await peers.usdcBalance(NETWORK, service())).toBe(before.usdc[0]! - PRICE);
    expect(await organisationBalance(db, organisationId)).toBe(1_000n - CREDITS);
    expect(await proxyPayments(organisationId)).toMatchObject([
      { state: 'charged', network: NETWORK, amount_micro_usdc: PRICE },
    ]);
  });
});

describe.each(VERSIONS)('a Solana target in x402 version %i asking for a mint we do not hold', (version) => {
  const target = () => otherToken(version);
  const mintDetails = () =>
    expect.stringMatching(
      new RegExp(`asset ${otherMint} is not USDC on ${NETWORK} \\(${peers.solanaLedgers[NETWORK]!.mint}\\)`),
    );

  it('/proxy/sim and /relay/sim refuse it with 422 asset_unsupported naming the mint', async () => {
    target().reset();
    const { key } = await createTestAccount(db, { credits: 1_000n });
    const before = await snapshot();

    const proxySim = await proxyCall('/proxy/sim', target(), key);
    const relaySim = await t.client.post('/relay/sim', { api_url: target().routes.paid.url, method: 'GET' });

    for (const res of [proxySim, relaySim]) {
      expect(res.status, res.text).toBe(422);
      expect(res.body).toEqual({ code: 'asset_unsupported', error: 'Unprocessable Content', details: mintDetails() });
    }
    onlyUnpaidCalls(target(), 2);
    expect(await snapshot()).toEqual(before);
  });

  it('/proxy and /relay refuse it with 422 asset_unsupported: nothing signed, held, charged or moved', async () => {
    target().reset();
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const before = await snapshot();

    const proxy = await proxyCall('/proxy', target(), key);
    const relayFirst = await t.client.post('/relay', { api_url: target().routes.paid.url, method: 'GET' });
    const relayPaying = await payingFetch(peers, NETWORK)(
      `${t.service.url}/relay`,
      relayRequest({ api_url: target().routes.paid.url, method: 'GET' }),
    );

    for (const res of [proxy, relayFirst]) {
      expect(res.status, res.text).toBe(422);
      expect(res.body).toMatchObject({ code: 'asset_unsupported', details: mintDetails() });
    }
    expect(relayPaying.status).toBe(422);
    expect(await relayPaying.json()).toMatchObject({ code: 'asset_unsupported', details: mintDetails() });
    onlyUnpaidCalls(target(), 3);
    expect(await organisationBalance(db, organisationId)).toBe(1_000n);
    expect(await proxyPayments(organisationId)).toEqual([]);
    expect(await snapshot()).toEqual(before);
  });
});
