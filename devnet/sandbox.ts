/**
 * The sandbox of `npm start` when nothing is configured (no wallet key, no RPC URL, NODE_ENV not
 * production): real local peers on 127.0.0.1 (EVM chains with the real chain ids and USDC at the
 * canonical addresses, Permit2 and x402's Permit2 proxies, both Solana clusters, an x402 v1 and a
 * v2 facilitator, x402-protected demo targets of both protocol versions: x402 v1 and v2 on every
 * network, and on Polygon Amoy and MegaETH targets asking for Permit2 and upto, and on Polygon Amoy
 * batch-settlement), funded
 * service wallets, and a demo organisation whose API key and a funded client wallet are printed
 * with commands for a paid proxy call, a paid relay call (also through a batch-settlement channel:
 * the service takes channels on the sandbox's EVM networks whose USDC moves by EIP-3009, unless
 * CHANNEL_RECEIVER_NETWORKS says otherwise) and a paid chat. State is written to
 * DATA_DIR/sandbox.json; keys are kept in DATA_DIR so the printed commands survive a restart.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import type { Hex } from 'viem';
import type { Db } from '../db/index';
import { authenticateKey, createApiKey, createOrganisation } from '../payments/accounts/accounts';
import { grantCredits } from '../payments/accounts/credits';
import { DEFAULT_NETWORK_NAMES, NETWORK_TABLE } from '../payments/basics/networkTable';
import { LOCAL_FINALITY_DEPTH, type NetworkName } from './networks';
import { required } from './required';
import type { SandboxPeers, SandboxPeersMessage, SandboxPeersRequest } from './sandboxPeers';
import type { X402Version } from './targets/payment';
import { prepareDataDir, type Sandbox, type SandboxOptions } from '../server/sandbox';

const SANDBOX_FILE = 'sandbox.json';
const KEYS_FILE = 'sandbox-keys.json';
const DEMO_CREDITS = 100_000n; // 100 USDC
const DEMO_KEY_DAILY_CAP = 100_000n;

interface SandboxKeys {
  serviceEvmPrivateKey: Hex;
  clientEvmPrivateKey: Hex;
  serviceSolanaSecretKey: number[];
  clientSolanaSecretKey: number[];
}

export interface SandboxState {
  baseUrl: string;
  /**
   * New at every start (32 bytes): the chains start fresh, so a client's channels belong to one
   * start. `sandbox:pay relay-channel` salts its channels with it and keeps them for this start only.
   */
  runId: Hex;
  apiKey: string;
  client: { evmPrivateKey: string; evmAddress: string; solanaSecretKey: number[]; solanaAddress: string };
  /** Base URL of every target by name. */
  targets: Record<string, string>;
  /** Every target's network and the x402 version it speaks (1: X-PAYMENT, 2: PAYMENT-SIGNATURE). */
  targetDetails: Record<string, { url: string; network: NetworkName; x402Version: X402Version }>;
  rpc: Record<string, string>;
  /** The x402 v1 facilitator, the service's FACILITATOR_URL. */
  facilitatorUrl: string;
  /** The x402 v2 facilitator (@x402/core), which the v2 targets use. */
  facilitatorV2Url: string;
  llmUrl: string;
  /** SSRF_ALLOW_HOSTS of the service: the sandbox's targets, and the user's own entries. */
  ssrfAllowHosts: { sandbox: string[]; user: string[] };
  /** CHANNEL_RECEIVER_NETWORKS of the service: the networks where /relay can be paid through a channel. */
  channelNetworks: string[];
}

function previousApiKey(stateFile: string): string | undefined {
  try {
    return (JSON.parse(readFileSync(stateFile, 'utf8')) as SandboxState).apiKey;
  } catch {
    return undefined;
  }
}

function readKeys(file: string): SandboxKeys | undefined {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as SandboxKeys;
  } catch {
    return undefined;
  }
}

/**
 * The worker thread that runs the peers (devnet/sandboxPeers.ts). From the bundle (dist/) its
 * entry is the bundle's sandbox-peers.js beside this chunk; from the TypeScript sources (tsx, the
 * tests) the worker imports sandboxPeers.ts through tsx's API, since it may not inherit a
 * TypeScript loader from this process.
 */
function peersWorker(request: SandboxPeersRequest): Worker {
  if (!import.meta.url.endsWith('.ts'))
    return new Worker(new URL('./sandbox-peers.js', import.meta.url), { workerData: request });
  const tsx = import.meta.resolve('tsx/esm/api');
  const entry = new URL('./sandboxPeers.ts', import.meta.url).href;
  const code = `import(${JSON.stringify(tsx)}).then(({ tsImport }) => tsImport(${JSON.stringify(entry)}, ${JSON.stringify(entry)}))`;
  return new Worker(code, { eval: true, workerData: request });
}

/** How long the peers get to stop before their worker is ended anyway. */
const PEERS_STOP_MS = 10_000;

/**
 * Starts the peers' worker and resolves once they all listen. An error the worker throws later
 * (its peers then stop answering, which the service's readiness reports) goes to `onError`.
 */
async function startPeersWorker(
  request: SandboxPeersRequest,
  onError: (error: unknown) => void,
): Promise<{ peers: SandboxPeers; stop(): Promise<void> }> {
  const worker = peersWorker(request);
  let starting = true;
  worker.on('error', (error) => {
    if (!starting) onError(error);
  });
  const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
  const next = (kind: SandboxPeersMessage['kind']) =>
    new Promise<SandboxPeersMessage>((resolve, reject) => {
      const onMessage = (message: SandboxPeersMessage) => {
        if (message.kind !== kind && message.kind !== 'failed') return;
        worker.off('message', onMessage);
        resolve(message);
      };
      worker.on('message', onMessage);
      worker.once('error', reject);
      void exited.then(() => reject(new Error("the sandbox peers' worker exited")));
    });
  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      const stopped = next('stopped').catch(() => undefined);
      worker.postMessage('stop');
      const bound = new Promise((resolve) => setTimeout(resolve, PEERS_STOP_MS).unref());
      await Promise.race([stopped, bound]);
      await worker.terminate();
    })();
    return stopping;
  };
  let started: SandboxPeersMessage;
  try {
    started = await next('started');
  } catch (error) {
    await worker.terminate();
    throw error;
  } finally {
    starting = false;
  }
  if (started.kind !== 'started') {
    await worker.terminate();
    throw started.kind === 'failed' ? started.error : new Error('the sandbox peers did not start');
  }
  return { peers: started.peers, stop };
}

export interface LocalSandbox extends Sandbox {
  ready(baseUrl: string, db: Db): Promise<SandboxState>;
}

export async function startSandbox(options: SandboxOptions): Promise<LocalSandbox> {
  const dataDir = path.resolve(options.dataDir);
  prepareDataDir(options);
  const print = options.print ?? ((text: string) => process.stdout.write(text));
  const keysFile = path.join(dataDir, KEYS_FILE);
  const saved = readKeys(keysFile);
  // The networks enabled by default, and the opt-in ones the sandbox enables too: Polygon Amoy
  // and MegaETH, whose targets ask for Permit2 (exact) and upto.
  const networks: NetworkName[] = [...(DEFAULT_NETWORK_NAMES as readonly NetworkName[]), 'polygon-amoy', 'megaeth'];
  const running = await startPeersWorker(
    {
      networks,
      keys: saved && {
        serviceEvmPrivateKey: saved.serviceEvmPrivateKey,
        clientEvmPrivateKey: saved.clientEvmPrivateKey,
        serviceSolanaSecretKey: Uint8Array.from(saved.serviceSolanaSecretKey),
        clientSolanaSecretKey: Uint8Array.from(saved.clientSolanaSecretKey),
      },
    },
    (error) => options.log.error({ err: error }, 'the sandbox peers failed'),
  );
  const { peers } = running;
  const { wallets, llm } = peers;
  if (!saved) {
    const keys: SandboxKeys = {
      serviceEvmPrivateKey: wallets.service.evm.privateKey,
      clientEvmPrivateKey: wallets.client.evm.privateKey,
      serviceSolanaSecretKey: [...wallets.service.solana.secretKey],
      clientSolanaSecretKey: [...wallets.client.solana.secretKey],
    };
    writeFileSync(keysFile, JSON.stringify(keys, null, 2) + '\n', { mode: 0o600 });
  }
  options.log.info({ startupMs: Math.round(peers.startupMs) }, 'sandbox peers started');

  // The sandbox's targets are on 127.0.0.1, which the SSRF guard refuses unless allow-listed. A
  // user's own SSRF_ALLOW_HOSTS (a local target of theirs) is kept beside them, not replaced.
  const sandboxHosts = [...new Set(peers.targets.map((target) => new URL(target.url).host))];
  const userHosts = (options.env.SSRF_ALLOW_HOSTS ?? '')
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '' && !sandboxHosts.includes(entry.toLowerCase()));
  const allowHosts = { sandbox: sandboxHosts, user: [...new Set(userHosts)] };
  const ssrfAllowHosts = [...allowHosts.sandbox, ...allowHosts.user].join(',');
  // Channels (x402 batch-settlement) are taken where deposits can be: EVM networks whose USDC moves by EIP-3009.
  const channelNetworks = peers.evmNetworks.filter((network) => NETWORK_TABLE[network].transferMethod === 'eip3009');
  // The operator's own list wins, an empty one included (no channels).
  const channelReceiverNetworks = options.env.CHANNEL_RECEIVER_NETWORKS ?? channelNetworks.join(',');
  const env: Record<string, string> = {
    NETWORKS: networks.join(','),
    EVM_PRIVATE_KEY: wallets.service.evm.privateKey,
    SOLANA_PRIVATE_KEY: JSON.stringify([...wallets.service.solana.secretKey]),
    FACILITATOR_URL: peers.facilitatorUrl,
    SSRF_ALLOW_HOSTS: ssrfAllowHosts,
    LLM_BASE_URL: llm.url,
    LLM_API_KEY: llm.apiKey,
    LLM_MODEL: llm.model,
    // The sandbox lists what it has paid (GET /discovery/resources) unless told otherwise.
    DISCOVERY: options.env.DISCOVERY ?? 'public',
    CHANNEL_RECEIVER_NETWORKS: channelReceiverNetworks,
  };
  for (const [network, url] of Object.entries(peers.rpcUrls)) {
    env[`RPC_URL_${network.toUpperCase().replace(/-/g, '_')}`] = required(url, `the RPC URL of ${network}`);
  }
  // The local EVM chains mine on request: a payment there is final a few blocks deep.
  for (const network of peers.evmNetworks)
    env[`FINALITY_DEPTH_${network.toUpperCase().replace(/-/g, '_')}`] = String(LOCAL_FINALITY_DEPTH);

  async function demoApiKey(db: Db, previous: string | undefined): Promise<string> {
    if (previous && (await authenticateKey(db, previous)).ok) return previous;
    const organisation = await createOrganisation(db, 'Sandbox demo');
    await grantCredits(db, organisation.organisationId, DEMO_CREDITS, 'sandbox demo grant');
    return (await createApiKey(db, organisation.accountId, DEMO_KEY_DAILY_CAP)).key;
  }

  const stateFile = path.join(dataDir, SANDBOX_FILE);
  // The demo key of the last start, kept while it still authenticates.
  let demoKey: Promise<string> | undefined;
  const demoKeyIn = (db: Db) => {
    demoKey ??= demoApiKey(db, previousApiKey(stateFile));
    return demoKey;
  };
  const runId = `0x${randomBytes(32).toString('hex')}` as const;

  return {
    env,
    async prepare(db) {
      await demoKeyIn(db);
    },
    async ready(baseUrl, db) {
      const state: SandboxState = {
        baseUrl,
        runId,
        apiKey: await demoKeyIn(db),
        client: {
          evmPrivateKey: wallets.client.evm.privateKey,
          evmAddress: wallets.client.evm.address,
          solanaSecretKey: [...wallets.client.solana.secretKey],
          solanaAddress: wallets.client.solana.address,
        },
        targets: Object.fromEntries(peers.targets.map((target) => [target.name, target.url])),
        targetDetails: Object.fromEntries(
          peers.targets.map((target) => [
            target.name,
            { url: target.url, network: target.network, x402Version: target.x402Version },
          ]),
        ),
        rpc: Object.fromEntries(Object.entries(peers.rpcUrls)),
        facilitatorUrl: peers.facilitatorUrl,
        facilitatorV2Url: peers.facilitatorV2Url,
        llmUrl: llm.url,
        ssrfAllowHosts: allowHosts,
        channelNetworks: channelReceiverNetworks
          .split(',')
          .map((name) => name.trim())
          .filter(Boolean),
      };
      writeFileSync(stateFile, JSON.stringify(state, null, 2) + '\n', { mode: 0o600 });
      print(banner(state, stateFile, ssrfAllowHosts));
      return state;
    },
    stop: () => running.stop(),
  };
}

/**
 * The sandbox's allow-listed hosts speaking one x402 version, with the name of the target on each,
 * two to a line. A target's version is in sandbox.json (targetDetails); hosts of no known target
 * are listed with version 1.
 */
function sandboxTargets(state: SandboxState, x402Version: X402Version): string {
  const versionOf = (host: string) =>
    Object.values(state.targetDetails).find((target) => new URL(target.url).host === host)?.x402Version ?? 1;
  const entries = state.ssrfAllowHosts.sandbox
    .filter((host) => versionOf(host) === x402Version)
    .map((host) => {
      const names = Object.entries(state.targets)
        .filter(([, url]) => new URL(url).host === host)
        .map(([name]) => name);
      return names.length > 0 ? `${host} (${names.join(', ')})` : host;
    });
  if (entries.length === 0) return '(none)';
  const lines: string[] = [];
  for (let index = 0; index < entries.length; index += 2) lines.push(entries.slice(index, index + 2).join(', '));
  return lines.join(',\n                    ');
}

function banner(state: SandboxState, stateFile: string, allowHosts: string): string {
  const paidTarget = `${state.targets['base-sepolia']}/paid`;
  const paidV2Target = state.targets['v2-base-sepolia'] ? `${state.targets['v2-base-sepolia']}/paid` : undefined;
  const line = '='.repeat(78);
  return `
${line}
 SANDBOX: nothing is configured, so this service runs against local peers on 127.0.0.1.
 No real money moves: the chains, USDC and Solana clusters here are local and start fresh.

 API            ${state.baseUrl}    (reference page: ${state.baseUrl}/docs)
 Demo API key   ${state.apiKey}    (organisation with ${DEMO_CREDITS} credits)
 Client wallet  EVM ${state.client.evmAddress} / Solana ${state.client.solanaAddress} (funded with USDC)
 Facilitator    ${state.facilitatorUrl} (x402 v1; v2: ${state.facilitatorV2Url})
 SSRF_ALLOW_HOSTS=${allowHosts}  (never set local hosts in production)
   x402 v1 targets  ${sandboxTargets(state, 1)}
   x402 v2 targets  ${sandboxTargets(state, 2)}
   yours            ${state.ssrfAllowHosts.user.length > 0 ? state.ssrfAllowHosts.user.join(', ') : '(none: set SSRF_ALLOW_HOSTS=host:port to call a local target of your own)'}
 Everything above, and the client keys, are in ${stateFile}

 A paid proxy call (the service wallet pays the target; your credits are charged):
   curl -s -X POST ${state.baseUrl}/proxy -H 'x-api-key: ${state.apiKey}' \\
     -H 'content-type: application/json' -d '{"api_url": "${paidTarget}", "method": "GET"}'

 A paid relay call (the client wallet pays the service with x402; the service pays the target):
   npm run sandbox:pay -- relay ${paidTarget}
   (any target above, path /paid: the client pays on the target's own network, EVM or Solana)
 The same through a batch-settlement channel (x402 v2): the first call deposits into the channel,
 the next ones send a voucher only and move no tokens (channels on ${state.channelNetworks.join(', ') || 'no network: CHANNEL_RECEIVER_NETWORKS is empty'}):
   npm run sandbox:pay -- relay-channel ${paidTarget}
${
  paidV2Target
    ? `   x402 v2 targets (@x402/express 2.27) answer the same routes: ${paidV2Target}
`
    : ''
}
 A paid chat (a local deterministic model; the client wallet pays 0.01 USDC on base):
   npm run sandbox:pay -- chat "Hello there"

 For AI agents, the MCP server (tools fetch, simulate, get_balance, relay_fetch, ...):
   over stdio:  ROUTER_URL=${state.baseUrl} ROUTER_API_KEY=${state.apiKey} \\
                ROUTER_WALLET_KEY=<client EVM key from sandbox.json> npx payment-router-mcp
   over HTTP:   ${state.baseUrl}/mcp  with the header x-api-key: ${state.apiKey}
 Paid resources seen so far: curl -s ${state.baseUrl}/discovery/resources
 Buy credits over x402: POST ${state.baseUrl}/v1/credits/purchase {"credits": 1000} with x-api-key

 Dry runs:
   curl -s -X POST ${state.baseUrl}/relay/sim -H 'content-type: application/json' \\
     -d '{"api_url": "${paidTarget}", "method": "GET"}'
${line}
`;
}
