// Unmodified @x402/fetch 2.27 with @x402/evm's exact client scheme, paying as a harness wallet:
// a pure x402 version 2 client by default (`eip155:*`), or one that also answers version 1 402s
// under the v1 names @x402/evm knows. With `solana`, @x402/svm's exact client scheme too, once per
// started cluster (its CAIP-2 id, and with v1Names its v1 name), each with that cluster's local RPC
// URL (the scheme takes one RPC URL; without one it would ask a public cluster). @x402/core's client
// pays only its default assets unless told otherwise, and the SKALE tokens are not among them: every
// local network's stablecoin is allowed, each capped per payment (in its own atomic units). With
// `upto`, @x402/evm's upto client scheme too. Offers asking exact through Permit2 are paid by the
// same exact scheme; the payer must have approved Permit2 on the token first, as x402 asks of it.
import type { KeyPairSigner } from '@solana/kit';
import { x402Client } from '@x402/core/client';
import { ExactEvmScheme, registerExactEvmScheme } from '@x402/evm/exact/client';
import { UptoEvmScheme } from '@x402/evm/upto/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { ExactSvmScheme } from '@x402/svm/exact/client';
import { ExactSvmSchemeV1 } from '@x402/svm/exact/v1/client';
import { getAddress, type LocalAccount } from 'viem';
import {
  ALL_EVM_NETWORK_NAMES,
  atomicAmount,
  CAIP2_NETWORKS,
  EVM_NETWORKS,
  SOLANA_NETWORK_NAMES,
  SOLANA_NETWORKS,
  type SolanaNetworkName,
} from '../networks.js';

export interface X402FetchV2Options {
  /** Also answer version 1 402s (the v1 names @x402/evm and @x402/svm know: not skale-base). Default false. */
  v1Names?: boolean;
  /** The most one payment may cost, in micro-USDC; default 100,000 (0.1 USDC). */
  maxValueMicroUsdc?: bigint;
  /** Also pay offers of the upto scheme on EVM networks (@x402/evm's upto client). Default false. */
  upto?: boolean;
  /** Also pay on these Solana clusters with @x402/svm's exact client, through their local RPC URLs. */
  solana?: { signer: KeyPairSigner; rpcUrls: Partial<Record<SolanaNetworkName, string>> };
}

export function x402ClientV2(account: LocalAccount, options: X402FetchV2Options = {}): x402Client {
  const client = new x402Client();
  if (options.v1Names) registerExactEvmScheme(client, { signer: account });
  else client.register('eip155:*', new ExactEvmScheme(account));
  if (options.upto) client.register('eip155:*', new UptoEvmScheme(account));
  if (options.solana) {
    const { signer, rpcUrls } = options.solana;
    for (const network of SOLANA_NETWORK_NAMES) {
      const rpcUrl = rpcUrls[network];
      if (rpcUrl === undefined) continue;
      client.register(CAIP2_NETWORKS[network], new ExactSvmScheme(signer, { rpcUrl }));
      if (options.v1Names) client.registerV1(network, new ExactSvmSchemeV1(signer, { rpcUrl }));
    }
  }
  const capMicroUsdc = options.maxValueMicroUsdc ?? 100_000n;
  return client.setSpendControls({
    allowedAssets: [
      ...ALL_EVM_NETWORK_NAMES.map((network) => ({
        network: CAIP2_NETWORKS[network],
        asset: getAddress(EVM_NETWORKS[network].usdc),
        maxAmountPerPayment: atomicAmount(network, capMicroUsdc).toString(),
      })),
      ...SOLANA_NETWORK_NAMES.map((network) => ({
        network: CAIP2_NETWORKS[network],
        asset: SOLANA_NETWORKS[network].usdc,
        maxAmountPerPayment: capMicroUsdc.toString(),
      })),
    ],
  });
}

export function x402FetchV2(account: LocalAccount, options: X402FetchV2Options = {}): typeof fetch {
  return wrapFetchWithPayment(fetch, x402ClientV2(account, options));
}
