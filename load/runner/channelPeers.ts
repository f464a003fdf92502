/**
 * Bench child: the local peers for the channel section, on Polygon Amoy (the opt-in network whose
 * default targets include `v2-batch-polygon-amoy`: the unmodified @x402/express 2.27 asking
 * batch-settlement alone, settled by the unmodified @x402/evm facilitator), and its x402 version 1
 * target asking exact (x402-express 1.2). A fresh client wallet
 * is minted USDC for the direct baseline. Over IPC: `chain` reads from the local chain how many
 * transactions our wallet sent, the deposits into its channels, and the channels contract's events by name (each counted once per
 * transaction); `claim` has the target's channel manager claim and settle.
 */
import { getAddress, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { batchTargetName, CAIP2_NETWORKS, EVM_NETWORKS, startPeers } from '../../devnet/index';
import { BATCH_SETTLEMENT_ADDRESS, batchSettlementAbi } from '../../devnet/evm/batch-settlement';
import { defined } from './checked';
import { serveChild } from './children';

const NETWORK = 'polygon-amoy' as const;
const priceMicroUsdc = BigInt(process.env.BENCH_CHANNEL_PRICE_MICRO_USDC ?? 1_000);
const peers = await startPeers({ networks: [NETWORK], pricesMicroUsdc: { paid: priceMicroUsdc } });
const target = defined(peers.targets[batchTargetName(NETWORK)], 'the batch-settlement target of the peers');
/** The x402 version 1 target on the same network, asking exact (EIP-3009): a settlement per call. */
const exactTarget = defined(peers.targets[NETWORK], 'the exact target of the peers');
const chain = defined(peers.evmChains[NETWORK], 'the Polygon Amoy chain of the peers');
const clientPrivateKey = generatePrivateKey();
await peers.mint(NETWORK, privateKeyToAccount(clientPrivateKey).address, 100_000_000n);
const ours = peers.wallets.service.evm.address;

/** Our wallet's transactions so far, and the channels contract's events: transactions per event name. */
async function onChain(): Promise<{
  ourTransactions: number;
  ourDeposits: number;
  contractEvents: Record<string, number>;
}> {
  const ourTransactions = await chain.publicClient.getTransactionCount({ address: ours });
  const events = await chain.publicClient.getContractEvents({
    address: BATCH_SETTLEMENT_ADDRESS,
    abi: batchSettlementAbi,
    fromBlock: 0n,
  });
  const byName = new Map<string, Set<Hex>>();
  // Our channels (created with our wallet as the payer), and the deposits into them.
  const ourChannels = new Set<string>();
  let ourDeposits = 0;
  for (const event of events) {
    const { eventName, args } = event as {
      eventName?: string;
      args?: { channelId?: Hex; config?: { payer?: string } };
    };
    if (eventName === 'ChannelCreated' && args?.config?.payer?.toLowerCase() === ours.toLowerCase())
      ourChannels.add(args.channelId ?? '');
    if (eventName === 'Deposited' && ourChannels.has(args?.channelId ?? '')) ourDeposits += 1;
  }
  for (const event of events) {
    const name = (event as { eventName?: string }).eventName ?? '?';
    let hashes = byName.get(name);
    if (!hashes) byName.set(name, (hashes = new Set()));
    hashes.add(event.transactionHash);
  }
  return {
    ourTransactions,
    ourDeposits,
    contractEvents: Object.fromEntries([...byName].map(([name, hashes]) => [name, hashes.size])),
  };
}

serveChild(
  {
    chain: () => onChain(),
    claim: async () => {
      const { claims, settle } = await defined(
        target.batchSettlement[0],
        'the target channel manager',
      ).manager.claimAndSettle();
      return { claims: claims.length, settled: settle?.transaction !== undefined };
    },
    /** When the target received its latest requests (for the split of each call, as the paid section's). */
    requests: (message: { last?: number }) =>
      target.requests.slice(-(message.last ?? 100)).map((request) => ({
        route: request.route,
        paid: request.payment !== null,
        receivedAtMs: request.receivedAtMs,
        status: request.status,
      })),
    reset: () => {
      target.reset();
      return {};
    },
  },
  {
    network: NETWORK,
    chainId: EVM_NETWORKS[NETWORK].chainId,
    caip2: CAIP2_NETWORKS[NETWORK],
    usdc: getAddress(EVM_NETWORKS[NETWORK].usdc),
    rpcUrl: peers.rpcUrls[NETWORK],
    facilitatorUrl: peers.facilitator.url,
    targetUrl: target.url,
    paidUrl: target.routes.paid.url,
    exactUrl: exactTarget.routes.paid.url,
    priceMicroUsdc: priceMicroUsdc.toString(),
    serviceEvmPrivateKey: peers.wallets.service.evm.privateKey,
    clientEvmPrivateKey: clientPrivateKey,
  },
  () => peers.stop(),
);
