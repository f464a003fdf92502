/**
 * The stdio server's wallet (mcp/stdio.ts): @x402/fetch paying the router's 402s for relay_fetch.
 * Loaded on the first paid call only, since viem and the x402 packages are most of what the server
 * would otherwise load at start.
 */
import { x402Client } from '@x402/core/client';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import { ExactEvmSchemeV1 } from '@x402/evm/exact/v1/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { privateKeyToAccount } from 'viem/accounts';
import { NETWORK_NAMES, NETWORK_TABLE, caip2Of } from '../payments/basics/networkTable';

/**
 * fetch, with PAYMENT-REQUIRED taken off 402 answers: our 402s carry the offers twice, in the
 * version 1 body and in that version 2 header, and @x402/fetch reads the header first. Without it,
 * the client reads the body and pays in version 1 (X-PAYMENT).
 */
function versionOneOffers(send: typeof fetch): typeof fetch {
  return async (input, init) => {
    const response = await send(input, init);
    if (response.status !== 402 || !response.headers.has('payment-required')) return response;
    const headers = new Headers(response.headers);
    headers.delete('payment-required');
    return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
  };
}

/** @x402/fetch paying as the wallet on every EVM network of ours, in the version asked for, capped per payment. */
export function walletFetch(privateKey: `0x${string}`, version: 1 | 2, maxPaymentMicroUsdc: bigint): typeof fetch {
  const account = privateKeyToAccount(privateKey);
  const client = new x402Client();
  const evm = NETWORK_NAMES.filter((network) => NETWORK_TABLE[network].chainType === 'evm');
  for (const network of evm) {
    if (version === 1) client.registerV1(network, new ExactEvmSchemeV1(account));
    else client.register(caip2Of(network), new ExactEvmScheme(account));
  }
  client.setSpendControls({
    allowedAssets: evm.map((network) => ({
      // Matched against the offer's network as it is written: a version 1 offer names the network by
      // its version 1 name (ours), a version 2 one by CAIP-2 (which is all @x402/core's type admits).
      network: (version === 1 ? network : caip2Of(network)) as `${string}:${string}`,
      asset: NETWORK_TABLE[network].usdc,
      maxAmountPerPayment: maxPaymentMicroUsdc.toString(),
    })),
  });
  return wrapFetchWithPayment(version === 1 ? versionOneOffers(fetch) : fetch, client);
}
