// The local EVM chains keep their block clock with the wall clock while idle, as a live chain does
// by producing blocks: contract calls run at the latest block's timestamp, so on a chain that mined
// nothing for a while every authorization with a recent validAfter reverted in the dry run.
import { afterAll, describe, expect, it } from 'vitest';
import { MAX_CLOCK_LAG_SECONDS } from '../../devnet/evm/chain';
import { startPeers, type Peers } from '../../devnet/index';
import { systemClock } from '../../payments/basics/clock';
import { NETWORK_TABLE } from '../../payments/basics/networkTable';
import { createChains, type Chains } from '../../payments/chains/index';
import { DEFAULT_PAYMENT_BOUNDS } from '../../payments/incoming/types';
import { relayOffer, verifyXPayment } from '../support/chains';

const nowSeconds = () => BigInt(Math.floor(Date.now() / 1000));
const idle = (seconds: number) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

const cleanups: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

describe.concurrent('an idle local chain', () => {
  it(
    'keeps its latest block within the lag bound of the wall clock, so a recent validAfter passes the dry run',
    { timeout: 60_000 },
    async () => {
      const network = 'base-sepolia';
      const peers: Peers = await startPeers({ networks: [network] });
      cleanups.push(() => peers.stop());
      const chains: Chains = await createChains({
        networks: [{ name: network, rpcUrl: peers.rpcUrls[network]!, usdc: NETWORK_TABLE[network].usdc }],
        evmPrivateKey: peers.wallets.service.evm.privateKey,
        solanaPrivateKey: undefined,
      });
      cleanups.push(() => chains.close());

      // Longer than the bound and its check interval: a chain that mines only on transactions is
      // now further behind than the authorization's validAfter.
      await idle(MAX_CLOCK_LAG_SECONDS + 6);
      const now = nowSeconds();
      const latest = await peers.evmChains[network]!.publicClient.getBlock({ blockTag: 'latest' });
      expect(latest.timestamp).toBeGreaterThanOrEqual(now - BigInt(MAX_CLOCK_LAG_SECONDS) - 1n);
      expect(latest.timestamp).toBeLessThanOrEqual(nowSeconds());

      const offer = await relayOffer(chains, network, { amountMicroUsdc: 10_300n, resource: 'http://127.0.0.1/paid' });
      const { header } = await peers.signEvmPayment(offer, {
        validAfter: now - BigInt(MAX_CLOCK_LAG_SECONDS) - 3n,
      });
      const verified = await verifyXPayment(header, [offer], {
        chains,
        clock: systemClock,
        paymentBounds: DEFAULT_PAYMENT_BOUNDS,
      });
      expect(verified).toMatchObject({ ok: true, value: { network, amountMicroUsdc: 10_300n } });
    },
  );
});
