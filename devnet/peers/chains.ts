// Starting the chains: a local EVM chain per EVM network with USDC (or the network's stablecoin),
// Permit2 and x402's Permit2 proxies, x402's batch-settlement channels contract and its deposit
// collectors, a litesvm ledger behind its JSON-RPC endpoint per Solana
// cluster, each funded for the service and the client.
import { installBatchSettlement } from '../evm/batch-settlement.js';
import { startEvmChain, type LocalEvmChain } from '../evm/chain.js';
import { installPermit2 } from '../evm/permit2.js';
import { installUsdc, type LocalUsdc } from '../evm/usdc.js';
import type { KeyedQueue } from '../key-queue.js';
import { atomicAmount, type EvmNetworkName, type SolanaNetworkName } from '../networks.js';
import { SolanaLedger } from '../svm/ledger.js';
import { startSolanaRpcServer, type SolanaRpcServer } from '../svm/rpc-server.js';
import type { PeerKeys } from './wallets.js';

const WEI_PER_ETH = 10n ** 18n;
const LAMPORTS_PER_SOL = 1_000_000_000n;

export interface Funding {
  serviceMicroUsdc: bigint;
  clientMicroUsdc: bigint;
}

/** Registers a close function; the peers close in the reverse order of starting. */
export type OnStop = (close: () => Promise<void>) => void;

export async function startEvmNetwork(
  network: EvmNetworkName,
  { wallets, minter, facilitatorEvm, facilitatorV2Evm }: PeerKeys,
  funding: Funding,
  queue: KeyedQueue,
  onStop: OnStop,
): Promise<{ chain: LocalEvmChain; usdc: LocalUsdc }> {
  const gas = 1_000n * WEI_PER_ETH;
  const chain = await startEvmChain(network, [
    { privateKey: minter.privateKey, balanceWei: gas },
    { privateKey: facilitatorEvm.privateKey, balanceWei: gas },
    { privateKey: facilitatorV2Evm.privateKey, balanceWei: gas },
    { privateKey: wallets.service.evm.privateKey, balanceWei: gas },
  ]);
  onStop(() => chain.close());
  const [usdc] = await Promise.all([
    installUsdc(chain, minter.account, queue),
    installPermit2(chain),
    installBatchSettlement(chain),
  ]);
  // The token refuses to mint nothing, as FiatToken does.
  if (funding.serviceMicroUsdc > 0n)
    await usdc.mint(wallets.service.evm.address, atomicAmount(network, funding.serviceMicroUsdc));
  if (funding.clientMicroUsdc > 0n)
    await usdc.mint(wallets.client.evm.address, atomicAmount(network, funding.clientMicroUsdc));
  return { chain, usdc };
}

export async function startSolanaCluster(
  network: SolanaNetworkName,
  { wallets, feePayer, feePayerV2, mintAuthority }: PeerKeys,
  funding: Funding,
  onStop: OnStop,
): Promise<{ ledger: SolanaLedger; server: SolanaRpcServer }> {
  const ledger = new SolanaLedger(network, mintAuthority.signer);
  // Its clock makes a slot and a blockhash every SLOT_DURATION_MS until the peers stop.
  onStop(() => {
    ledger.close();
    return Promise.resolve();
  });
  ledger.airdrop(feePayer.address, 100n * LAMPORTS_PER_SOL);
  ledger.airdrop(feePayerV2.address, 100n * LAMPORTS_PER_SOL);
  ledger.airdrop(wallets.service.solana.address, 100n * LAMPORTS_PER_SOL);
  await ledger.mintUsdc(wallets.service.solana.address, funding.serviceMicroUsdc);
  await ledger.mintUsdc(wallets.client.solana.address, funding.clientMicroUsdc);
  await ledger.createUsdcAccount(wallets.target.solana.address);
  const server = await startSolanaRpcServer(ledger);
  onStop(() => server.close());
  return { ledger, server };
}
