/**
 * Clients of /relay for tests: a fetch whose every response is checked against the document (so
 * the unmodified x402-fetch can wrap it), x402-fetch over it for an EVM network or a Solana
 * cluster of the peers, and reads of the relay's rows.
 */
import { wrapFetchWithPayment } from 'x402-fetch';
import type { Db } from '../../db/index';
import type { EvmNetworkName, Peers, SolanaNetworkName } from '../../devnet/index';
import { expect } from 'vitest';
import { checkResponse } from './contract';
import type { TestService } from './service';

/** fetch, with the response checked against the document before the caller reads it. */
export function contractFetch(): typeof fetch {
  return async (input, init) => {
    // A Request (as @x402/fetch and the MCP client send) carries its own method.
    const request = new Request(input, init);
    const response = await fetch(request);
    const text = await response.text();
    const url = new URL(request.url);
    const contentType = (response.headers.get('content-type') ?? '').split(';')[0]!.trim();
    const body = contentType === 'application/json' && text !== '' ? JSON.parse(text) : text;
    await checkResponse(request.method, `${url.pathname}${url.search}`, {
      status: response.status,
      headers: response.headers,
      body,
      text,
      operationId: undefined,
    });
    return new Response(text === '' ? null : text, { status: response.status, headers: response.headers });
  };
}

/** The unmodified x402-fetch paying as the harness's client (or the given key) over contractFetch. */
export function payingFetch(
  peers: Peers,
  network: EvmNetworkName | SolanaNetworkName,
  maxValueMicroUsdc = 1_000_000n,
): typeof fetch {
  if (network === 'solana' || network === 'solana-devnet') {
    return wrapFetchWithPayment(contractFetch(), peers.wallets.client.solana.signer, maxValueMicroUsdc, undefined, {
      svmConfig: { rpcUrl: peers.rpcUrls[network]! },
    }) as typeof fetch;
  }
  return wrapFetchWithPayment(
    contractFetch(),
    peers.evmWalletClient(network) as never,
    maxValueMicroUsdc,
  ) as typeof fetch;
}

export function relayRequest(body: Record<string, unknown>, headers: Record<string, string> = {}): RequestInit {
  return { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) };
}

/** The USDC the harness's client and service wallets and `payTo` hold on an EVM network: the three legs of a relay. */
export async function relayLegBalances(
  peers: Peers,
  network: EvmNetworkName,
  payTo: string,
): Promise<{ client: bigint; service: bigint; target: bigint }> {
  return {
    client: await peers.usdcBalance(network, peers.wallets.client.evm.address),
    service: await peers.usdcBalance(network, peers.wallets.service.evm.address),
    target: await peers.usdcBalance(network, payTo),
  };
}

/** A /relay call of the network's paid target, paid by the harness's client: 200, and its row, delivered. */
export async function paidRelayRow(peers: Peers, t: TestService, network: EvmNetworkName | SolanaNetworkName) {
  const response = await payingFetch(peers, network)(
    `${t.service.url}/relay`,
    relayRequest({ api_url: peers.targets[network]!.routes.paid.url, method: 'GET' }),
  );
  expect(response.status).toBe(200);
  const row = await t.database.handle.db
    .selectFrom('relay_transactions')
    .selectAll()
    .where('client_tx_hash', '=', response.headers.get('x-client-payment')!)
    .executeTakeFirstOrThrow();
  expect(row.state).toBe('delivered');
  return row;
}

export async function relayRows(db: Db) {
  return db.selectFrom('relay_transactions').selectAll().orderBy('id').execute();
}
