/**
 * The service set up to pay the local peers of devnet: RPC URLs of the running networks, the
 * harness's funded service wallets, and exactly the targets' host:port pairs allow-listed.
 */
import { expect } from 'vitest';
import type { Db } from '../../db/index';
import { organisationBalance } from '../../payments/accounts/credits';
import type { ServiceOptions } from '../../server/service';
import {
  LOCAL_FINALITY_DEPTH,
  startPeers,
  type NetworkName,
  type Peers,
  type StartPeersOptions,
} from '../../devnet/index';
import type { LocalLlm } from '../../devnet/llm';
import { tableResolver } from './resolver';
import { startTestService, type TestService } from './service';

const RPC_VARIABLES: Record<NetworkName, string> = {
  base: 'RPC_URL_BASE',
  'base-sepolia': 'RPC_URL_BASE_SEPOLIA',
  'skale-base': 'RPC_URL_SKALE_BASE',
  'skale-base-sepolia': 'RPC_URL_SKALE_BASE_SEPOLIA',
  polygon: 'RPC_URL_POLYGON',
  'polygon-amoy': 'RPC_URL_POLYGON_AMOY',
  megaeth: 'RPC_URL_MEGAETH',
  solana: 'RPC_URL_SOLANA',
  'solana-devnet': 'RPC_URL_SOLANA_DEVNET',
};

export function peersEnv(peers: Peers, extraAllowHosts: string[] = []): Record<string, string> {
  const env: Record<string, string> = {
    NETWORKS: peers.networks.join(','),
    EVM_PRIVATE_KEY: peers.wallets.service.evm.privateKey,
    SOLANA_PRIVATE_KEY: peers.wallets.service.solana.secretKeyBase58,
    SSRF_ALLOW_HOSTS: [
      ...Object.values(peers.targets).map((target) => new URL(target.url).host),
      ...extraAllowHosts,
    ].join(','),
  };
  for (const network of peers.networks) env[RPC_VARIABLES[network]] = peers.rpcUrls[network]!;
  for (const network of peers.evmNetworks)
    env[`FINALITY_DEPTH_${network.toUpperCase().replace(/-/g, '_')}`] = String(LOCAL_FINALITY_DEPTH);
  return env;
}

export async function startProxyService(
  peers: Peers,
  env: Record<string, string> = {},
  options: ServiceOptions = {},
): Promise<TestService> {
  return startTestService({ ...peersEnv(peers), ...env }, { resolver: tableResolver(), ...options });
}

/** The local peers and a proxy service on them, as most e2e files start them; the peers stop again if the service fails to start. */
export async function startPeersAndProxyService(
  options: StartPeersOptions,
): Promise<{ peers: Peers; t: TestService; db: Db }> {
  const peers = await startPeers(options);
  try {
    const t = await startProxyService(peers);
    return { peers, t, db: t.database.handle.db };
  } catch (error) {
    await peers.stop();
    throw error;
  }
}

/** The service's environment for /llm/chat on the local model, its answers at most 16 tokens. */
export function llmEnv(llm: LocalLlm): Record<string, string> {
  return { LLM_BASE_URL: llm.url, LLM_API_KEY: llm.apiKey, LLM_MODEL: llm.model, LLM_MAX_TOKENS: '16' };
}

/** A service on the peers (no allow-listed host beyond the targets) with /llm/chat on the local model. */
export function startLlmService(peers: Peers, llm: LocalLlm): Promise<TestService> {
  return startTestService({ ...peersEnv(peers), ...llmEnv(llm) });
}

export interface LedgerSums {
  grant: bigint;
  reserve: bigint;
  charge: bigint;
  release: bigint;
  refund: bigint;
  /** Credits bought over x402; present only when some were. */
  purchase?: bigint;
}

export async function ledgerSums(db: Db, organisationId: bigint): Promise<LedgerSums> {
  const rows = await db
    .selectFrom('credit_ledger')
    .select(['kind', 'amount_credits'])
    .where('organisation_id', '=', organisationId)
    .execute();
  const sums: LedgerSums = { grant: 0n, reserve: 0n, charge: 0n, release: 0n, refund: 0n };
  for (const row of rows) sums[row.kind] = (sums[row.kind] ?? 0n) + row.amount_credits;
  return sums;
}

/** An account granted 1,000 credits paid exactly `credits` for one call: reserved and charged, nothing released or refunded. */
export async function expectChargedOnce(db: Db, organisationId: bigint, credits: bigint): Promise<void> {
  expect(await organisationBalance(db, organisationId)).toBe(1_000n - credits);
  expect(await ledgerSums(db, organisationId)).toEqual({
    grant: 1_000n,
    reserve: credits,
    charge: credits,
    release: 0n,
    refund: 0n,
  });
}

/** Polls GET /webhooks/{id} until it leaves 202 (at most timeoutMs); every answer is contract-checked. */
export async function pollWebhook(service: TestService, id: string, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const response = await service.client.get(`/webhooks/${id}`);
    if (response.status !== 202 || Date.now() > deadline) return response;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}
