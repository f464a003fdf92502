// A relay paid after the local chain sat idle for more than a minute: the chain keeps its block
// clock with the wall clock (test/devnet/chain-clock.test.ts), so the payment HTTPayer's SDK makes
// (validAfter = now - 60) passes the dry run and settles.
import { getAddress } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { HttpayerSdkClient } from '../support/httpayer-sdk';
import { startProxyService } from '../support/proxy';
import type { TestService } from '../support/service';

const nowSeconds = () => BigInt(Math.floor(Date.now() / 1000));
const idle = (seconds: number) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

const cleanups: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

describe('an idle local chain', () => {
  it(
    "after more than a minute without traffic, a relay paid as HTTPayer's SDK pays (validAfter = now - 60) settles",
    { timeout: 120_000 },
    async () => {
      const network = 'base';
      const price = 10_000n;
      const peers: Peers = await startPeers({ networks: [network], pricesMicroUsdc: { paid: price } });
      cleanups.push(() => peers.stop());
      const t: TestService = await startProxyService(peers);
      cleanups.push(() => t.stop());
      const privateKey = generatePrivateKey();
      const payer = privateKeyToAccount(privateKey).address;
      await peers.mint(network, payer, 1_000_000n);
      const client = new HttpayerSdkClient({ routerUrl: t.service.url, privateKey, maxRetries: 1 });
      expect((await client.loadConfig()).status).toBe(200);

      await idle(65);
      const target = peers.targets[network]!.routes.paid;
      // The SDK signs after this moment, with validAfter its own clock's second less 60.
      const beforeCall = nowSeconds();
      const answer = await client.payInvoice({ method: 'GET', url: target.url });

      expect(answer.status, answer.text).toBe(200);
      const validAfter = BigInt(client.attempts[0]!.payment!.payload.authorization.validAfter);
      expect(validAfter).toBeGreaterThanOrEqual(beforeCall - 61n);
      const total = (price * 103n) / 100n;
      expect(await peers.usdcBalance(network, payer)).toBe(1_000_000n - total);
      expect(await peers.usdcBalance(network, getAddress(target.payTo))).toBe(price);
    },
  );
});
