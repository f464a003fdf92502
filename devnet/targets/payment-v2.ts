// The x402 version 2 payment layer of a paid route: the unmodified @x402/express 2.27 middleware
// with an x402ResourceServer that asks the v2 facilitator over HTTP (HTTPFacilitatorClient).
// Prices are given as atomic USDC with the token and its EIP-712 domain, so no float is involved
// and the networks @x402/evm has no default asset for (SKALE) work the same. `paymentMiddleware`
// starts fetching the facilitator's /supported in the background and answers a 500 to the first
// paid request if that failed; here the same middleware (paymentMiddlewareFromHTTPServer, which
// paymentMiddleware wraps) gets a server initialized first, so a started target is ready and none
// of its fetches is still in flight when the peers stop.
import { decodePaymentSignatureHeader, encodePaymentRequiredHeader } from '@x402/core/http';
import { HTTPFacilitatorClient, x402HTTPResourceServer } from '@x402/core/server';
import type { PaymentRequired } from '@x402/core/types';
import { ExactEvmScheme } from '@x402/evm/exact/server';
import { paymentMiddlewareFromHTTPServer, x402ResourceServer } from '@x402/express';
import type { Request, RequestHandler } from 'express';
import { getAddress } from 'viem';
import { CAIP2_NETWORKS, EVM_NETWORKS, isEvmNetwork, type NetworkName } from '../networks.js';
import { MAX_TIMEOUT_SECONDS, type PaidRoute } from './payment.js';

export const V2_PAYMENT_HEADER = 'PAYMENT-SIGNATURE';
export const V2_PAYMENT_RESPONSE_HEADER = 'PAYMENT-RESPONSE';
export const V2_PAYMENT_REQUIRED_HEADER = 'PAYMENT-REQUIRED';

/** Whether @x402/express 2.27 can ask for payment on this network with the harness's peers. */
export function x402ExpressV2Knows(network: NetworkName): boolean {
  return isEvmNetwork(network);
}

export interface V2Layer {
  handler: RequestHandler;
  /** Resolves once the facilitator's /supported has been read and the route checked against it. */
  ready: Promise<void>;
}

/** @x402/express 2.27 in front of one route, verifying and settling through the v2 facilitator. */
export function x402ExpressV2Layer(route: PaidRoute, facilitatorUrl: string): V2Layer {
  if (!isEvmNetwork(route.network)) throw new Error(`the v2 targets do not serve ${route.network}`);
  const network = CAIP2_NETWORKS[route.network];
  const { usdc, eip712 } = EVM_NETWORKS[route.network];
  const server = new x402ResourceServer(new HTTPFacilitatorClient({ url: facilitatorUrl })).register(
    network,
    new ExactEvmScheme(),
  );
  const httpServer = new x402HTTPResourceServer(server, {
    [route.path]: {
      accepts: {
        scheme: 'exact',
        network,
        payTo: getAddress(route.payTo),
        price: {
          amount: route.priceMicroUsdc.toString(),
          asset: getAddress(usdc),
          extra: { name: eip712.name, version: eip712.version },
        },
        maxTimeoutSeconds: MAX_TIMEOUT_SECONDS,
      },
      description: route.description,
      mimeType: 'application/json',
    },
  });
  const ready = httpServer.initialize();
  // Awaited by startTarget; a rejection is its failure, not an unhandled one.
  ready.catch(() => undefined);
  return { handler: paymentMiddlewareFromHTTPServer(httpServer, undefined, undefined, false), ready };
}

/**
 * The PAYMENT-REQUIRED header of a v2 target that refuses a payment it verified (the never-settles
 * route): the offer the payment accepted, asked for again. Undefined without a readable payment.
 */
export function askAgainHeader(request: Request, error: string): string | undefined {
  const header = request.header(V2_PAYMENT_HEADER);
  if (!header) return undefined;
  try {
    const payment = decodePaymentSignatureHeader(header);
    const paymentRequired: PaymentRequired = {
      x402Version: 2,
      error,
      resource: payment.resource ?? {
        url: `${request.protocol}://${request.headers.host ?? ''}${request.path}`,
        description: '',
        mimeType: 'application/json',
      },
      accepts: [payment.accepted],
    };
    return encodePaymentRequiredHeader(paymentRequired);
  } catch {
    return undefined;
  }
}
