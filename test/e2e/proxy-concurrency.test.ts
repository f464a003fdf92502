// 50 paid /proxy calls at the same moment against credits for exactly 20: the reservation decides
// which 20 are paid; the other 30 are refused before anything is signed. Balances on the chain
// and in the ledger agree to the unit.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { organisationBalance } from '../../payments/accounts/credits';
import { proxyCredits } from '../../payments/accounts/fees';
import { startPeers, type Peers } from '../../devnet/index';
import { createTestAccount } from '../support/accounts';
import { ledgerSums, startProxyService } from '../support/proxy';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const PRICE = 7_000n;
const CREDITS = proxyCredits(PRICE, 3).totalCredits;
const CALLS = 50;
const AFFORDABLE = 20n;

let peers: Peers;
let t: TestService;

beforeAll(async () => {
  peers = await startPeers({ networks: ['base-sepolia'], pricesMicroUsdc: { paid: PRICE } });
  t = await startProxyService(peers);
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

describe('concurrent paid calls', () => {
  it(`${CALLS} at once against credits for exactly ${AFFORDABLE}: exactly ${AFFORDABLE} are paid and the balance ends at 0`, async () => {
    const db = t.database.handle.db;
    const target = peers.targets['base-sepolia']!;
    const { key, organisationId } = await createTestAccount(db, { credits: AFFORDABLE * CREDITS });
    const service = peers.wallets.service.evm.address;
    const before = {
      service: await peers.usdcBalance('base-sepolia', service),
      target: await peers.usdcBalance('base-sepolia', target.routes.paid.payTo),
    };

    const responses = await Promise.all(
      Array.from({ length: CALLS }, () =>
        t.client.post('/proxy', { api_url: target.routes.paid.url, method: 'GET' }, { headers: { 'x-api-key': key } }),
      ),
    );

    const statuses = responses.map((response) => response.status);
    expect(statuses.filter((status) => status === 200)).toHaveLength(Number(AFFORDABLE));
    expect(statuses.filter((status) => status === 402)).toHaveLength(CALLS - Number(AFFORDABLE));
    for (const refused of responses.filter((response) => response.status === 402)) {
      expect(refused.body).toEqual({
        code: 'insufficient_credits',
        error: 'Insufficient credits',
        details: expect.any(String),
      });
    }
    expect(await organisationBalance(db, organisationId)).toBe(0n);
    expect(await ledgerSums(db, organisationId)).toEqual({
      grant: AFFORDABLE * CREDITS,
      reserve: AFFORDABLE * CREDITS,
      charge: AFFORDABLE * CREDITS,
      release: 0n,
      refund: 0n,
    });
    const rows = await db
      .selectFrom('proxy_payments')
      .select(['state'])
      .where('organisation_id', '=', organisationId)
      .execute();
    expect(rows.map((row) => row.state)).toEqual(Array(Number(AFFORDABLE)).fill('charged'));
    // Only the 20 reserved calls signed a payment, and each was paid once.
    expect(target.requests.filter((request) => request.payment !== null)).toHaveLength(Number(AFFORDABLE));
    expect(await peers.usdcBalance('base-sepolia', service)).toBe(before.service - AFFORDABLE * PRICE);
    expect(await peers.usdcBalance('base-sepolia', target.routes.paid.payTo)).toBe(before.target + AFFORDABLE * PRICE);
  });
});
