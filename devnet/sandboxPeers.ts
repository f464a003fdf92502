/**
 * The sandbox's peers (startPeers for the sandbox's networks, and the local chat model) in a worker
 * thread of `npm start` (devnet/sandbox.ts starts it): loading their packages and starting the
 * chains take seconds of CPU, which run here beside the service's own start on the main thread
 * (its modules, the embedded Postgres and its migrations). The worker answers a `SandboxPeers`
 * description (plain data) once everything listens, and stops the peers when asked.
 */
import { parentPort, workerData } from 'node:worker_threads';
import type { Hex } from 'viem';
import { startPeers } from './index';
import { startLocalLlm } from './llm';
import type { EvmNetworkName, NetworkName } from './networks';
import type { X402Version } from './targets/payment';

export interface SandboxPeersRequest {
  networks: NetworkName[];
  keys:
    | {
        serviceEvmPrivateKey: Hex;
        clientEvmPrivateKey: Hex;
        serviceSolanaSecretKey: Uint8Array;
        clientSolanaSecretKey: Uint8Array;
      }
    | undefined;
}

interface WalletKeys {
  evm: { privateKey: Hex; address: string };
  solana: { secretKey: Uint8Array; address: string };
}

/** What the sandbox needs of its running peers. */
export interface SandboxPeers {
  wallets: { service: WalletKeys; client: WalletKeys };
  targets: Array<{ name: string; url: string; network: NetworkName; x402Version: X402Version }>;
  rpcUrls: Partial<Record<NetworkName, string>>;
  evmNetworks: EvmNetworkName[];
  facilitatorUrl: string;
  facilitatorV2Url: string;
  llm: { url: string; apiKey: string; model: string };
  startupMs: number;
}

export type SandboxPeersMessage =
  { kind: 'started'; peers: SandboxPeers } | { kind: 'failed'; error: unknown } | { kind: 'stopped' };

async function run(port: NonNullable<typeof parentPort>): Promise<void> {
  const { networks, keys } = workerData as SandboxPeersRequest;
  const send = (message: SandboxPeersMessage) => port.postMessage(message);
  let stop: (() => Promise<void>) | undefined;
  port.on('message', (message: unknown) => {
    if (message !== 'stop') return;
    void (stop ?? (() => Promise.resolve()))().finally(() => send({ kind: 'stopped' }));
  });
  try {
    const [peers, llm] = await Promise.all([startPeers({ networks, keys }), startLocalLlm()]);
    stop = async () => {
      await llm.close();
      await peers.stop();
    };
    const wallet = ({ evm, solana }: (typeof peers.wallets)['service']): WalletKeys => ({
      evm: { privateKey: evm.privateKey, address: evm.address },
      solana: { secretKey: solana.secretKey, address: solana.address },
    });
    send({
      kind: 'started',
      peers: {
        wallets: { service: wallet(peers.wallets.service), client: wallet(peers.wallets.client) },
        targets: Object.values(peers.targets).map(({ name, url, network, x402Version }) => ({
          name,
          url,
          network,
          x402Version,
        })),
        rpcUrls: peers.rpcUrls,
        evmNetworks: peers.evmNetworks,
        facilitatorUrl: peers.facilitator.url,
        facilitatorV2Url: peers.facilitatorV2.url,
        llm: { url: llm.url, apiKey: llm.apiKey, model: llm.model },
        startupMs: peers.startupMs,
      },
    });
  } catch (error) {
    try {
      send({ kind: 'failed', error });
    } catch {
      // Not cloneable (a property holding a socket or a function): its message and stack.
      const { message, stack } = error instanceof Error ? error : new Error(String(error));
      send({ kind: 'failed', error: Object.assign(new Error(message), { stack }) });
    }
  }
}

if (parentPort) await run(parentPort);
