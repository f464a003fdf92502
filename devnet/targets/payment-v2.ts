// The x402 version 2 payment layer of a paid route: the unmodified @x402/express 2.27 middleware
// with an x402ResourceServer that asks the v2 facilitator over HTTP (HTTPFacilitatorClient).
// Prices are given as atomic units of the network's stablecoin with the token (and on EVM its
// EIP-712 domain), so no float is involved and the networks @x402/evm has no default asset for
// (SKALE) work the same. On EVM a route asks `exact` with EIP-3009 or Permit2, `upto`, or
// `batch-settlement` (channels: @x402/evm's server scheme with its in-memory channel storage and
// its own receiver authorizer key, one per target, network and payTo). On Solana the
// scheme is @x402/svm's exact server scheme: the offer's `extra.feePayer` is the one the
// facilitator's /supported lists for the cluster; no recent blockhash is embedded (the payer fetches
// its own from its RPC). `paymentMiddleware` starts fetching the facilitator's /supported in the
// background and answers a 500 to the first paid request if that failed; here the same middleware
// (paymentMiddlewareFromHTTPServer, which paymentMiddleware wraps) gets a server initialized
// first, so a started target is ready and none of its fetches is still in flight when the peers stop.
import { decodePaymentSignatureHeader, encodePaymentRequiredHeader } from '@x402/core/http';
import { HTTPFacilitatorClient, x402HTTPResourceServer } from '@x402/core/server';
import type {
  AssetAmount,
  PaymentPayload,
  PaymentRequired,
  SchemeNetworkServer,
  SettleResponse,
} from '@x402/core/types';
import { declareDiscoveryExtension } from '@x402/extensions/bazaar';
import {
  declarePaymentIdentifierExtension,
  extractPaymentIdentifier,
  PAYMENT_IDENTIFIER,
  paymentIdentifierResourceServerExtension,
} from '@x402/extensions/payment-identifier';
import { ExactEvmScheme } from '@x402/evm/exact/server';
import { UptoEvmScheme } from '@x402/evm/upto/server';
import {
  BatchSettlementEvmScheme,
  InMemoryChannelStorage,
  type BatchSettlementChannelManager,
} from '@x402/evm/batch-settlement/server';
import { ExactSvmScheme } from '@x402/svm/exact/server';
import { paymentMiddlewareFromHTTPServer, setSettlementOverrides, x402ResourceServer } from '@x402/express';
import type { Request, RequestHandler } from 'express';
import { getAddress, type Address } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import {
  atomicAmount,
  CAIP2_NETWORKS,
  EVM_NETWORKS,
  isEvmNetwork,
  SOLANA_NETWORKS,
  type EvmNetworkName,
  type EvmTransferMethod,
  type NetworkName,
} from '../networks.js';
import { MAX_TIMEOUT_SECONDS, type PaidRoute } from './payment.js';

export const V2_PAYMENT_HEADER = 'PAYMENT-SIGNATURE';
export const V2_PAYMENT_RESPONSE_HEADER = 'PAYMENT-RESPONSE';
export const V2_PAYMENT_REQUIRED_HEADER = 'PAYMENT-REQUIRED';

/** Whether @x402/express 2.27 can ask for payment on this network with the harness's peers: on every one. */
export function x402ExpressV2Knows(network: NetworkName): boolean {
  return Object.hasOwn(CAIP2_NETWORKS, network);
}

/**
 * What a v2 target asks on EVM networks beyond exact EIP-3009 (@x402/evm 2.27): `exact` paid
 * through Permit2 (`extra.assetTransferMethod: "permit2"`, the x402ExactPermit2Proxy), or `upto`
 * (always Permit2, the x402UptoPermit2Proxy): the payer signs the price as a maximum and the
 * target settles `uptoChargeMicroUsdc` of it (default: all of it).
 */
export interface V2OfferKind {
  /** `batch-settlement`: channels (see BatchSettlementReceivers); `uptoChargeMicroUsdc` (default the price) is charged per call. */
  scheme: 'exact' | 'upto' | 'batch-settlement';
  /** exact only; default: the network's own (Permit2 on MegaETH, EIP-3009 elsewhere). */
  assetTransferMethod?: EvmTransferMethod;
  /** upto and batch-settlement: what the target charges on each paid call, in micro-USDC; at most the price. */
  uptoChargeMicroUsdc?: bigint;
}

/** The withdraw delay the batch-settlement targets ask for: the contract's minimum, 15 minutes. */
export const BATCH_SETTLEMENT_WITHDRAW_DELAY_SECONDS = 900;

/**
 * The receiving side of a batch-settlement target on one network and payTo: @x402/evm's server
 * scheme (shared by every route paid there, so one channel serves them all), its in-memory channel
 * storage, the receiver authorizer key that signs its claims and refunds, and its channel manager,
 * which claims and settles through the v2 facilitator when told to (no timers run).
 */
export interface BatchSettlementReceiver {
  network: EvmNetworkName;
  payTo: Address;
  token: Address;
  receiverAuthorizer: Address;
  scheme: BatchSettlementEvmScheme;
  storage: InMemoryChannelStorage;
  manager: BatchSettlementChannelManager;
}

/** A target's batch-settlement receivers, made on first use, one per network and payTo. */
export class BatchSettlementReceivers {
  private readonly byKey = new Map<string, BatchSettlementReceiver>();

  constructor(private readonly facilitatorUrl: string) {}

  get all(): BatchSettlementReceiver[] {
    return [...this.byKey.values()];
  }

  for(network: EvmNetworkName, payTo: string): BatchSettlementReceiver {
    const key = `${network}:${payTo.toLowerCase()}`;
    const known = this.byKey.get(key);
    if (known) return known;
    const receiverAuthorizer = privateKeyToAccount(generatePrivateKey());
    const storage = new InMemoryChannelStorage();
    const scheme = new BatchSettlementEvmScheme(getAddress(payTo), {
      storage,
      receiverAuthorizerSigner: receiverAuthorizer,
      withdrawDelay: BATCH_SETTLEMENT_WITHDRAW_DELAY_SECONDS,
    });
    const token = getAddress(EVM_NETWORKS[network].usdc);
    const manager = scheme.createChannelManager(
      new HTTPFacilitatorClient({ url: this.facilitatorUrl }),
      CAIP2_NETWORKS[network],
      token,
    );
    const receiver: BatchSettlementReceiver = {
      network,
      payTo: getAddress(payTo),
      token,
      receiverAuthorizer: receiverAuthorizer.address,
      scheme,
      storage,
      manager,
    };
    this.byKey.set(key, receiver);
    return receiver;
  }
}

/** The route's price as atomic units of the network's stablecoin, its payTo as the network writes addresses, and the scheme of its kind of chain. */
function offerOf(
  route: PaidRoute,
  kind: V2OfferKind,
  receivers: BatchSettlementReceivers | undefined,
): { scheme: SchemeNetworkServer; payTo: string; price: AssetAmount } {
  const amount = atomicAmount(route.network, route.priceMicroUsdc).toString();
  if (isEvmNetwork(route.network) && kind.scheme === 'batch-settlement') {
    if (!receivers) throw new Error(`a batch-settlement route needs its target's receivers (${route.path})`);
    const { usdc, eip712, transferMethod } = EVM_NETWORKS[route.network];
    return {
      scheme: receivers.for(route.network, route.payTo).scheme,
      payTo: getAddress(route.payTo),
      price: {
        amount,
        asset: getAddress(usdc),
        // The token's EIP-712 domain, for the deposit's ERC-3009 authorization (or Permit2 where
        // the stablecoin moves only through it).
        extra: {
          name: eip712.name,
          version: eip712.version,
          ...(transferMethod === 'permit2' ? { assetTransferMethod: 'permit2' } : {}),
        },
      },
    };
  }
  if (isEvmNetwork(route.network)) {
    const { usdc, eip712, transferMethod } = EVM_NETWORKS[route.network];
    const permit2 = kind.scheme === 'upto' || (kind.assetTransferMethod ?? transferMethod) === 'permit2';
    return {
      scheme: kind.scheme === 'upto' ? new UptoEvmScheme() : new ExactEvmScheme(),
      payTo: getAddress(route.payTo),
      price: {
        amount,
        asset: getAddress(usdc),
        extra: {
          name: eip712.name,
          version: eip712.version,
          ...(permit2 ? { assetTransferMethod: 'permit2' } : {}),
        },
      },
    };
  }
  if (kind.scheme !== 'exact')
    throw new Error(`the v2 targets serve ${kind.scheme} on EVM networks only, not ${route.network}`);
  return {
    scheme: new ExactSvmScheme(),
    payTo: route.payTo,
    price: { amount, asset: route.solanaMint ?? SOLANA_NETWORKS[route.network].usdc },
  };
}

/**
 * The x402 extensions a v2 target's paid routes declare, with @x402/extensions 2.27:
 * `paymentIdentifier` declares payment-identifier (an id is optional) and makes the route
 * idempotent by it, as the extension intends: a payment whose id this target already settled is
 * answered again from that settlement (its verification and settlement skipped), never paid twice.
 * `bazaar` declares discovery metadata (declareDiscoveryExtension: a GET with a `city` query, a
 * JSON answer). `other` declares extensions no client knows, verbatim: a client must echo them
 * and may ignore them.
 */
export interface V2Extensions {
  paymentIdentifier?: boolean;
  bazaar?: boolean;
  other?: Record<string, unknown>;
}

/** The bazaar metadata the v2 targets declare with `bazaar`. */
export const TARGET_BAZAAR_DECLARATION = {
  method: 'GET',
  input: { city: 'Lisbon' },
  inputSchema: { properties: { city: { type: 'string' } }, required: ['city'] },
  output: { example: { paid: true, city: 'Lisbon', temperature: 21 } },
} as const;

/** The ids of payments a target settled, each with its settlement: a payment sent again is answered from it. */
function idempotentByPaymentId(server: x402ResourceServer, seen: string[]): void {
  const settled = new Map<string, SettleResponse>();
  server.registerExtension(paymentIdentifierResourceServerExtension);
  server.onBeforeVerify((context) => {
    const id = extractPaymentIdentifier(context.paymentPayload as PaymentPayload);
    if (id !== null) seen.push(id);
    const kept = id === null ? undefined : settled.get(id);
    return Promise.resolve(
      kept === undefined ? undefined : { skip: true as const, result: { isValid: true, payer: kept.payer } },
    );
  });
  server.onBeforeSettle((context) => {
    const id = extractPaymentIdentifier(context.paymentPayload as PaymentPayload);
    const kept = id === null ? undefined : settled.get(id);
    return Promise.resolve(kept === undefined ? undefined : { skip: true as const, result: kept });
  });
  server.onAfterSettle((context) => {
    const id = extractPaymentIdentifier(context.paymentPayload as PaymentPayload);
    if (id !== null && context.result.success) settled.set(id, structuredClone(context.result));
    return Promise.resolve();
  });
}

function declaredExtensions(extensions: V2Extensions): Record<string, unknown> {
  return {
    ...(extensions.paymentIdentifier ? { [PAYMENT_IDENTIFIER]: declarePaymentIdentifierExtension(false) } : {}),
    ...(extensions.bazaar ? declareDiscoveryExtension(TARGET_BAZAAR_DECLARATION) : {}),
    ...extensions.other,
  };
}

export interface V2Layer {
  handlers: RequestHandler[];
  /** Resolves once the facilitator's /supported has been read and the route checked against it. */
  ready: Promise<void>;
  /** With the paymentIdentifier extension: every payment id the route was sent, in order (into the list given). */
  paymentIds: string[];
}

/** @x402/express 2.27 in front of one route, verifying and settling through the v2 facilitator. */
export function x402ExpressV2Layer(
  route: PaidRoute,
  facilitatorUrl: string,
  kind: V2OfferKind = { scheme: 'exact' },
  extensions: V2Extensions = {},
  paymentIds: string[] = [],
  receivers?: BatchSettlementReceivers,
): V2Layer {
  if (!x402ExpressV2Knows(route.network)) throw new Error(`the v2 targets do not serve ${route.network}`);
  const network = CAIP2_NETWORKS[route.network];
  const { scheme, payTo, price } = offerOf(route, kind, receivers);
  const server = new x402ResourceServer(new HTTPFacilitatorClient({ url: facilitatorUrl })).register(network, scheme);
  if (extensions.paymentIdentifier) idempotentByPaymentId(server, paymentIds);
  const declared = declaredExtensions(extensions);
  const httpServer = new x402HTTPResourceServer(server, {
    [route.path]: {
      accepts: {
        scheme: kind.scheme,
        network,
        payTo,
        price,
        maxTimeoutSeconds: MAX_TIMEOUT_SECONDS,
      },
      description: route.description,
      mimeType: 'application/json',
      ...(Object.keys(declared).length > 0 ? { extensions: declared } : {}),
    },
  });
  const ready = httpServer.initialize();
  // Awaited by startTarget; a rejection is its failure, not an unhandled one.
  ready.catch(() => undefined);
  const handlers: RequestHandler[] = [paymentMiddlewareFromHTTPServer(httpServer, undefined, undefined, false)];
  if (kind.scheme === 'upto' || (kind.scheme === 'batch-settlement' && kind.uptoChargeMicroUsdc !== undefined)) {
    const charge = kind.uptoChargeMicroUsdc ?? route.priceMicroUsdc;
    if (charge > route.priceMicroUsdc) throw new Error(`an upto target charges at most its price (${route.path})`);
    // What the call used: @x402/express settles (upto) or commits on the channel (batch-settlement) this amount instead of the maximum.
    const amount = atomicAmount(route.network, charge).toString();
    handlers.push((_request, response, next) => {
      setSettlementOverrides(response, { amount });
      next();
    });
  }
  return { handlers, ready, paymentIds };
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
