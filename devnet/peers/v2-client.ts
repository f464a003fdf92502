// Unmodified @x402/fetch 2.27 with @x402/evm's exact client scheme, paying as a harness wallet:
// a pure x402 version 2 client by default (`eip155:*`), or one that also answers version 1 402s
// under the v1 names @x402/evm knows. @x402/core's client pays only its default assets unless told
// otherwise, and the SKALE tokens are not among them: every local network's USDC is allowed, each
// capped per payment.
import { x402Client } from '@x402/core/client';
import { ExactEvmScheme, registerExactEvmScheme } from '@x402/evm/exact/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { getAddress, type LocalAccount } from 'viem';
import { CAIP2_NETWORKS, EVM_NETWORK_NAMES, EVM_NETWORKS } from '../networks.js';

export interface X402FetchV2Options {
  /** Also answer version 1 402s (the v1 names @x402/evm knows: not skale-base). Default false. */
  v1Names?: boolean;
  /** The most one payment may cost, in micro-USDC; default 100,000 (0.1 USDC). */
  maxValueMicroUsdc?: bigint;
}

export function x402ClientV2(account: LocalAccount, options: X402FetchV2Options = {}): x402Client {
  const client = new x402Client();
  if (options.v1Names) registerExactEvmScheme(client, { signer: account });
  else client.register('eip155:*', new ExactEvmScheme(account));
  const cap = (options.maxValueMicroUsdc ?? 100_000n).toString();
  return client.setSpendControls({
    allowedAssets: EVM_NETWORK_NAMES.map((network) => ({
      network: CAIP2_NETWORKS[network],
      asset: getAddress(EVM_NETWORKS[network].usdc),
      maxAmountPerPayment: cap,
    })),
  });
}

export function x402FetchV2(account: LocalAccount, options: X402FetchV2Options = {}): typeof fetch {
  return wrapFetchWithPayment(fetch, x402ClientV2(account, options));
}
