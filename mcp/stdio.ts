/**
 * `npx payment-router-mcp` (or `npm run mcp`): the router's MCP server over stdio, for an MCP
 * client on the agent's machine. ROUTER_URL (default http://127.0.0.1:3000) and ROUTER_API_KEY
 * name the router and the key; ROUTER_WALLET_KEY, an EVM private key, lets relay_fetch pay the
 * router itself, in x402 version ROUTER_X402_VERSION (2 by default, or 1) with @x402/fetch, each
 * payment at most ROUTER_MAX_PAYMENT (atomic USDC, default 1000000 = 1 USDC). Logs go to stderr:
 * stdout carries the protocol. A thin client of the HTTP API: it loads the MCP SDK and the tools
 * at start, and the wallet's packages (mcp/wallet.ts) on the first paid call.
 */
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { createRouterMcpServer } from './tools';

/** The order of secp256k1's group: a private key is a number from 1 to this, exclusive. */
const SECP256K1_ORDER = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;

function fail(message: string): never {
  process.stderr.write(`payment-router-mcp: ${message}\n`);
  process.exit(2);
}

/** A fetch that pays as the wallet, whose packages are loaded when it first pays. */
function lazyWalletFetch(privateKey: `0x${string}`, version: 1 | 2, maxPaymentMicroUsdc: bigint): typeof fetch {
  let paying: Promise<typeof fetch> | undefined;
  return async (input, init) => {
    paying ??= import('./wallet').then(({ walletFetch }) => walletFetch(privateKey, version, maxPaymentMicroUsdc));
    return (await paying)(input, init);
  };
}

async function main(): Promise<void> {
  const baseUrl = process.env.ROUTER_URL ?? 'http://127.0.0.1:3000';
  try {
    new URL(baseUrl);
  } catch {
    fail('ROUTER_URL is not a URL');
  }
  const walletKey = process.env.ROUTER_WALLET_KEY;
  if (walletKey !== undefined) {
    if (!/^0x[0-9a-fA-F]{64}$/.test(walletKey)) fail('ROUTER_WALLET_KEY must be 0x and 64 hex digits');
    if (BigInt(walletKey) === 0n || BigInt(walletKey) >= SECP256K1_ORDER)
      fail('ROUTER_WALLET_KEY is not a secp256k1 private key (0 or not below the curve order)');
  }
  const version = process.env.ROUTER_X402_VERSION ?? '2';
  if (version !== '1' && version !== '2') fail('ROUTER_X402_VERSION must be 1 or 2');
  const max = process.env.ROUTER_MAX_PAYMENT ?? '1000000';
  if (!/^[1-9][0-9]{0,17}$/.test(max)) fail('ROUTER_MAX_PAYMENT must be a positive whole number of atomic USDC');
  const server = createRouterMcpServer({
    baseUrl,
    apiKey: process.env.ROUTER_API_KEY,
    payingFetch: walletKey
      ? lazyWalletFetch(walletKey as `0x${string}`, version === '1' ? 1 : 2, BigInt(max))
      : undefined,
  });
  await server.connect(new StdioServerTransport());
}

await main();
