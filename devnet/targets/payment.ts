// The x402 version 1 payment layers a paid route can sit behind. x402-express 1.2.0, unmodified,
// for the networks it knows; for the others (skale-base) our own layer, which answers the same 402
// body, verifies and settles through the same facilitator and sets the same X-PAYMENT-RESPONSE.
// The version 2 layer (@x402/express 2.27) is in payment-v2.ts.
import type { Request, RequestHandler, Response } from 'express';
import { getAddress } from 'viem';
import { useFacilitator } from 'x402/verify';
import { paymentMiddleware } from 'x402-express';
import { SupportedEVMNetworks, SupportedSVMNetworks } from 'x402/types';
import { EVM_NETWORKS, SOLANA_NETWORKS, USDC_DECIMALS, isEvmNetwork, type NetworkName } from '../networks.js';
import {
  decodePaymentHeader,
  encodePaymentResponseHeader,
  X402_VERSION,
  type PaymentPayload,
  type PaymentRequiredBody,
  type PaymentRequirements,
} from '../x402.js';
import type { Reply } from './routes.js';

export const MAX_TIMEOUT_SECONDS = 60;

export interface PaidRoute {
  path: string;
  network: NetworkName;
  payTo: string;
  priceMicroUsdc: bigint;
  description: string;
  /** Solana: the mint asked for instead of the cluster's USDC. */
  solanaMint?: string;
}

/** x402-express 1.2.0 and our own layer speak x402 version 1; @x402/express 2.27 speaks version 2. */
export type PaymentLayerName = 'x402-express' | 'own' | '@x402/express';

export type X402Version = 1 | 2;

export function versionOfLayer(layer: PaymentLayerName): X402Version {
  return layer === '@x402/express' ? 2 : 1;
}

/** Whether unmodified x402-express 1.2.0 can ask for payment on this network. */
export function x402ExpressKnows(network: NetworkName): boolean {
  return (
    (SupportedEVMNetworks as readonly string[]).includes(network) ||
    (SupportedSVMNetworks as readonly string[]).includes(network)
  );
}

/** The requirements x402-express 1.2.0 would build for this route and request. */
export function requirementsFor(route: PaidRoute, request: Request, solanaFeePayer: string): PaymentRequirements {
  const common = {
    scheme: 'exact' as const,
    network: route.network,
    maxAmountRequired: route.priceMicroUsdc.toString(),
    resource: `${request.protocol}://${request.headers.host}${request.path}`,
    description: route.description,
    mimeType: 'application/json',
    maxTimeoutSeconds: MAX_TIMEOUT_SECONDS,
    outputSchema: { input: { type: 'http', method: request.method.toUpperCase(), discoverable: true } },
  };
  if (isEvmNetwork(route.network)) {
    const { usdc, eip712 } = EVM_NETWORKS[route.network];
    return {
      ...common,
      payTo: getAddress(route.payTo),
      asset: getAddress(usdc),
      extra: { name: eip712.name, version: eip712.version },
    };
  }
  return {
    ...common,
    payTo: route.payTo,
    asset: route.solanaMint ?? SOLANA_NETWORKS[route.network].usdc,
    extra: { feePayer: solanaFeePayer },
  };
}

export function paymentRequired(error: string, accepts: PaymentRequirements[], payer?: string): PaymentRequiredBody {
  return { x402Version: X402_VERSION, error, accepts, ...(payer ? { payer } : {}) };
}

/** x402-express in front of one route; the price is given in atomic units, so no float is involved. */
export function x402ExpressLayer(route: PaidRoute, facilitatorUrl: string): RequestHandler {
  const asset = isEvmNetwork(route.network)
    ? {
        address: getAddress(EVM_NETWORKS[route.network].usdc),
        decimals: USDC_DECIMALS,
        eip712: EVM_NETWORKS[route.network].eip712,
      }
    : { address: route.solanaMint ?? SOLANA_NETWORKS[route.network].usdc, decimals: USDC_DECIMALS };
  const middleware = paymentMiddleware(
    (isEvmNetwork(route.network) ? getAddress(route.payTo) : route.payTo) as Parameters<typeof paymentMiddleware>[0],
    {
      [route.path]: {
        price: { amount: route.priceMicroUsdc.toString(), asset } as never,
        network: route.network as never,
        config: {
          description: route.description,
          mimeType: 'application/json',
          maxTimeoutSeconds: MAX_TIMEOUT_SECONDS,
        },
      },
    },
    { url: facilitatorUrl as `${string}://${string}` },
  );
  return middleware;
}

/**
 * Our own layer, for one route: the same steps as x402-express 1.2.0 (402 without X-PAYMENT,
 * verify, run the handler, settle only when it answered below 400, X-PAYMENT-RESPONSE).
 */
export function createOwnLayer(facilitatorUrl: string, solanaFeePayer: string) {
  const facilitator = useFacilitator({ url: facilitatorUrl as `${string}://${string}` });

  return async function serveOwnPaidRoute(
    route: PaidRoute,
    request: Request,
    response: Response,
    produce: () => Promise<Reply>,
  ): Promise<void> {
    const requirements = requirementsFor(route, request, solanaFeePayer);
    const refuse = (error: string, payer?: string) =>
      response.status(402).json(paymentRequired(error, [requirements], payer));

    const header = request.header('X-PAYMENT');
    if (!header) return void refuse('X-PAYMENT header is required');
    let payment: PaymentPayload;
    try {
      payment = decodePaymentHeader(header);
      payment.x402Version = X402_VERSION;
    } catch {
      return void refuse('Invalid or malformed payment header');
    }
    if (payment.scheme !== requirements.scheme || payment.network !== requirements.network) {
      return void refuse('Unable to find matching payment requirements');
    }
    try {
      const verification = await facilitator.verify(payment as never, requirements as never);
      if (!verification.isValid)
        return void refuse(verification.invalidReason ?? 'invalid_payment', verification.payer);
    } catch (error) {
      return void refuse(error instanceof Error ? error.message : 'Payment verification failed');
    }

    const reply = await produce();
    if (reply.status >= 400) {
      response.status(reply.status).json(reply.body);
      return;
    }
    try {
      const settlement = await facilitator.settle(payment as never, requirements as never);
      if (!settlement.success) return void refuse(settlement.errorReason ?? 'settlement_failed');
      response.setHeader('X-PAYMENT-RESPONSE', encodePaymentResponseHeader(settlement));
    } catch (error) {
      return void refuse(error instanceof Error ? error.message : 'Payment settlement failed');
    }
    response.status(reply.status).json(reply.body);
  };
}
