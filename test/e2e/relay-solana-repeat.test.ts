// Issue 23: the same client pays the same Solana target twice, the same amount to the same payTo,
// through POST /relay with the unmodified x402-fetch, on both clusters. Signing is deterministic, so
// the two payments differ only by their blockhash: the local clusters make a new one every slot, as
// live ones do, and the second payment (made in a later slot) is a second transaction. The ledger
// shows both: two client transactions and two payments to the target on chain, two rows in our
// records, and every balance moved twice. Every answer of ours is checked against the document
// (contractFetch under x402-fetch).
import { createSolanaRpc, type Signature } from '@solana/kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import type { Peers, SolanaNetworkName } from '../../devnet/index';
import { SLOT_DURATION_MS } from '../../devnet/svm/ledger';
import { decodePaymentResponseHeader } from '../../payments/x402/headers';
import { startPeersAndProxyService } from '../support/proxy';
import { payingFetch, relayRequest, relayRows } from '../support/relay';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORKS: SolanaNetworkName[] = ['solana', 'solana-devnet'];
const PRICE = 10_000n;
/** ceil(10,000 x 1.03) micro-USDC: what the client pays us. */
const TOTAL = 10_300n;

let peers: Peers;
let t: TestService;
let db: Db;

beforeAll(async () => {
  ({ peers, t, db } = await startPeersAndProxyService({ networks: NETWORKS, pricesMicroUsdc: { paid: PRICE } }));
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

async function legs(network: SolanaNetworkName) {
  return {
    client: await peers.usdcBalance(network, peers.wallets.client.solana.address),
    service: await peers.usdcBalance(network, peers.wallets.service.solana.address),
    target: await peers.usdcBalance(network, peers.targets[network]!.routes.paid.payTo),
  };
}

/** The slot a transaction landed in, and whether it succeeded, as the cluster reports it. */
async function landed(network: SolanaNetworkName, signature: string) {
  const { value } = await createSolanaRpc(peers.rpcUrls[network]!)
    .getSignatureStatuses([signature as Signature])
    .send();
  return value[0];
}

/**
 * Waits (bounded) until the cluster is past `slot`: a client paying again later signs with a newer
 * blockhash than any a transaction of that slot used.
 */
async function pastSlot(network: SolanaNetworkName, slot: bigint): Promise<void> {
  const rpc = createSolanaRpc(peers.rpcUrls[network]!);
  const deadline = Date.now() + 50 * SLOT_DURATION_MS;
  while ((await rpc.getSlot().send()) <= slot) {
    if (Date.now() > deadline) throw new Error(`${network} stayed at slot ${slot}`);
    await new Promise((resolve) => setTimeout(resolve, SLOT_DURATION_MS / 4));
  }
}

describe('the same client pays the same Solana target twice through /relay', () => {
  it.each(NETWORKS)(
    'on %s: two payments, two transactions on chain, two records, the money moved twice',
    async (network) => {
      const target = peers.targets[network]!;
      const before = await legs(network);
      const pay = async () => {
        const response = await payingFetch(peers, network)(
          `${t.service.url}/relay`,
          relayRequest({ api_url: target.routes.paid.url, method: 'GET', network }),
        );
        expect(response.status, await response.clone().text()).toBe(200);
        expect(response.headers.get('idempotent-replayed')).toBeNull();
        expect(await response.json()).toEqual({ ok: true, route: 'paid', target: network, network });
        const toTarget = decodePaymentResponseHeader(response.headers.get('x-payment-response'));
        expect(toTarget).toMatchObject({ ok: true, value: { success: true, network } });
        return {
          client: response.headers.get('x-client-payment')!,
          target: toTarget.ok ? toTarget.value.transaction : '',
        };
      };

      const first = await pay();
      const firstLanded = await landed(network, first.client);
      expect(firstLanded).toMatchObject({ err: null });
      await pastSlot(network, firstLanded!.slot);
      const second = await pay();

      expect(new Set([first.client, second.client, first.target, second.target]).size).toBe(4);
      for (const signature of [first.client, second.client, first.target, second.target])
        expect(await landed(network, signature), signature).toMatchObject({ err: null });

      const rows = (await relayRows(db)).filter((row) => row.network === network);
      expect(rows.map((row) => row.client_tx_hash)).toEqual([first.client, second.client]);
      expect(new Set(rows.map((row) => row.nonce_key)).size).toBe(2);
      for (const row of rows)
        expect(row).toMatchObject({
          state: 'delivered',
          payer: peers.wallets.client.solana.address,
          amount_micro: TOTAL,
          target_network: network,
          target_amount_micro: PRICE,
          target_status: 200,
          mode: 'relay',
        });
      expect(rows.map((row) => row.target_tx_hash)).toEqual([first.target, second.target]);

      expect(await legs(network)).toEqual({
        client: before.client - 2n * TOTAL,
        service: before.service + 2n * (TOTAL - PRICE),
        target: before.target + 2n * PRICE,
      });
      expect(target.requests.filter((request) => request.route === 'paid' && request.status === 200)).toHaveLength(2);
    },
  );
});
