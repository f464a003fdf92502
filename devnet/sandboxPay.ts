/**
 * `npm run sandbox:pay -- relay|proxy <target url>` or `-- chat <message>`: a paid call through the
 * running sandbox, as a client would make it. relay and chat pay the service with the unmodified
 * x402-fetch and the sandbox's funded client wallet (relay on base-sepolia, chat on base); proxy
 * uses the demo API key. Reads DATA_DIR/sandbox.json.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { createWalletClient, defineChain, http, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import type { SandboxState } from './sandbox';
import { NETWORK_TABLE } from '../payments/networks/table';

async function main(): Promise<void> {
  const [mode, targetUrl] = process.argv.slice(2);
  if ((mode !== 'relay' && mode !== 'proxy' && mode !== 'chat') || !targetUrl) {
    process.stderr.write('usage: npm run sandbox:pay -- relay|proxy <target url>, or -- chat <message>\n');
    process.exit(2);
  }
  const stateFile = path.resolve(process.env.DATA_DIR ?? './.data', 'sandbox.json');
  let state: SandboxState;
  try {
    state = JSON.parse(readFileSync(stateFile, 'utf8'));
  } catch {
    process.stderr.write(`no sandbox state at ${stateFile}: start the sandbox with \`npm start\` first\n`);
    process.exit(1);
  }
  const body = JSON.stringify({ api_url: targetUrl, method: 'GET' });
  const x402Fetch = async (network: 'base' | 'base-sepolia') => {
    const { wrapFetchWithPayment } = await import('x402-fetch');
    const chain = defineChain({
      id: NETWORK_TABLE[network].chainId!,
      name: network,
      nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
      rpcUrls: { default: { http: [state.rpc[network]] } },
    });
    const wallet = createWalletClient({ account: privateKeyToAccount(state.client.evmPrivateKey as Hex), chain, transport: http(state.rpc[network]) });
    return wrapFetchWithPayment(fetch, wallet as never, 1_000_000n);
  };
  let response: Response;
  if (mode === 'proxy') {
    response = await fetch(`${state.baseUrl}/proxy`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': state.apiKey },
      body,
    });
  } else if (mode === 'chat') {
    const pay = await x402Fetch('base');
    const message = process.argv.slice(3).join(' ');
    response = await pay(`${state.baseUrl}/llm/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: message }] }),
    });
  } else {
    const pay = await x402Fetch('base-sepolia');
    response = await pay(`${state.baseUrl}/relay`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  }
  process.stdout.write(`HTTP ${response.status}\n`);
  for (const [name, value] of response.headers) {
    if (/^x-(payment-response|client-payment|service-|refund-|request-id)/i.test(name)) process.stdout.write(`${name}: ${value}\n`);
  }
  process.stdout.write(`\n${await response.text()}\n`);
}

await main();
