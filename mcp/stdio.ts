/**
 * `npx payment-router-mcp` (or `npm run mcp`): the router's MCP server over stdio, for an MCP
 * client on the agent's machine. ROUTER_URL (default http://127.0.0.1:3000) and ROUTER_API_KEY
 * name the router and the key; ROUTER_WALLET_KEY, an EVM private key, lets relay_fetch pay the
 * router itself, in x402 version ROUTER_X402_VERSION (2 by default, or 1) with @x402/fetch, each
 * payment at most ROUTER_MAX_PAYMENT (atomic USDC, default 1000000 = 1 USDC). Logs go to stderr:
 * stdout carries the protocol.
 */
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { x402Client } from '@x402/core/client';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import { ExactEvmSchemeV1 } from '@x402/evm/exact/v1/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { privateKeyToAccount } from 'viem/accounts';
import { NETWORK_NAMES, NETWORK_TABLE, caip2Of } from '../payments/networkTable';
import { createRouterMcpServer } from './tools';

function fail(message: string): never {
  process.stderr.write(`payment-router-mcp: ${message}\n`);
  process.exit(2);
}

/** @x402/fetch paying as the wallet on every EVM network of ours, in the version asked for, capped per payment. */
export function walletFetch(privateKey: string, version: 1 | 2, maxPaymentMicroUsdc: bigint): typeof fetch {
  const account = privateKeyToAccount(privateKey as `0x${string}`);
  const client = new x402Client();
  const evm = NETWORK_NAMES.filter((network) => NETWORK_TABLE[network].chainType === 'evm');
  for (const network of evm) {
    if (version === 1) client.registerV1(network, new ExactEvmSchemeV1(account));
    else client.register(caip2Of(network), new ExactEvmScheme(account));
  }
  client.setSpendControls({
    allowedAssets: evm.map((network) => ({
      network: caip2Of(network),
      asset: NETWORK_TABLE[network].usdc,
      maxAmountPerPayment: maxPaymentMicroUsdc.toString(),
    })),
  });
  return wrapFetchWithPayment(fetch, client);
}

async function main(): Promise<void> {
  const baseUrl = process.env.ROUTER_URL ?? 'http://127.0.0.1:3000';
  try {
    new URL(baseUrl);
  } catch {
    fail('ROUTER_URL is not a URL');
  }
  const walletKey = process.env.ROUTER_WALLET_KEY;
  if (walletKey !== undefined && !/^0x[0-9a-fA-F]{64}$/.test(walletKey))
    fail('ROUTER_WALLET_KEY must be 0x and 64 hex digits');
  const version = process.env.ROUTER_X402_VERSION ?? '2';
  if (version !== '1' && version !== '2') fail('ROUTER_X402_VERSION must be 1 or 2');
  const max = process.env.ROUTER_MAX_PAYMENT ?? '1000000';
  if (!/^[1-9][0-9]{0,17}$/.test(max)) fail('ROUTER_MAX_PAYMENT must be a positive whole number of atomic USDC');
  const server = createRouterMcpServer({
    baseUrl,
    apiKey: process.env.ROUTER_API_KEY,
    payingFetch: walletKey ? walletFetch(walletKey, version === '1' ? 1 : 2, BigInt(max)) : undefined,
  });
  await server.connect(new StdioServerTransport());
}

await main();
