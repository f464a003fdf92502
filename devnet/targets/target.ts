// One x402-protected target: an express app on 127.0.0.1 serving every route of routes.ts, each
// free or paid (price, payTo and network per route), recording every request it receives and how
// many are in flight at once.
import express, { type Express, type Request, type RequestHandler } from 'express';
import { listenLocally } from '../http.js';
import type { NetworkName } from '../networks.js';
import {
  createOwnLayer,
  paymentRequired,
  requirementsFor,
  x402ExpressKnows,
  x402ExpressLayer,
  type PaidRoute,
  type PaymentLayerName,
} from './payment.js';
import {
  DEFAULT_HOLD_TIMEOUT_MS,
  DEFAULT_SLOW_DELAY_MS,
  HoldGate,
  ROUTE_NAMES,
  ROUTE_PATHS,
  replyFor,
  requestBodyText,
  type RouteContext,
  type RouteName,
} from './routes.js';

export const MAX_REQUEST_BODY = '1mb';

export interface RouteSettings {
  /** Price in micro-USDC; null makes the route free. */
  priceMicroUsdc: bigint | null;
  payTo: string;
  network: NetworkName;
}

export interface TargetConfig {
  name: string;
  network: NetworkName;
  payTo: string;
  /** Default: x402-express where it knows the route's network, our own layer elsewhere. */
  paymentLayer?: PaymentLayerName;
  routes: Record<RouteName, RouteSettings>;
  slowDelayMs?: number;
  errorStatus?: number;
  holdTimeoutMs?: number;
}

export interface RecordedRequest {
  route: RouteName | null;
  method: string;
  path: string;
  query: Record<string, unknown>;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  contentType: string | null;
  /** The X-PAYMENT header, when one came. */
  payment: string | null;
  receivedAtMs: number;
  /** Filled when the answer has been sent. */
  status: number | null;
  paymentResponse: string | null;
}

export interface Target {
  name: string;
  network: NetworkName;
  payTo: string;
  url: string;
  routes: Record<RouteName, RouteSettings & { url: string; paymentLayer: PaymentLayerName | null }>;
  requests: RecordedRequest[];
  readonly inFlight: number;
  readonly maxInFlight: number;
  hold: HoldGate;
  /** Forgets recorded requests and the concurrency maxima. */
  reset(): void;
  close(): Promise<void>;
}

export async function startTarget(
  config: TargetConfig,
  facilitatorUrl: string,
  solanaFeePayer: string,
): Promise<Target> {
  const stopping = new AbortController();
  const hold = new HoldGate(config.holdTimeoutMs ?? DEFAULT_HOLD_TIMEOUT_MS);
  const context: RouteContext = {
    targetName: config.name,
    network: config.network,
    slowDelayMs: config.slowDelayMs ?? DEFAULT_SLOW_DELAY_MS,
    errorStatus: config.errorStatus ?? 500,
    hold,
    signal: stopping.signal,
  };
  const recorder = new RequestRecorder();

  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.use(express.raw({ type: () => true, limit: MAX_REQUEST_BODY }));
  app.use(recorder.middleware);

  const serveOwnPaidRoute = createOwnLayer(facilitatorUrl, solanaFeePayer);
  const routes = {} as Target['routes'];
  for (const route of ROUTE_NAMES) {
    routes[route] = mountRoute(app, route, { config, context, facilitatorUrl, solanaFeePayer, serveOwnPaidRoute });
  }

  const server = await listenLocally(app);
  for (const route of ROUTE_NAMES) routes[route].url = `${server.url}${ROUTE_PATHS[route]}`;

  return {
    name: config.name,
    network: config.network,
    payTo: config.payTo,
    url: server.url,
    routes,
    requests: recorder.requests,
    get inFlight() {
      return recorder.inFlight;
    },
    get maxInFlight() {
      return recorder.maxInFlight;
    },
    hold,
    reset() {
      recorder.reset();
      hold.resetCounters();
    },
    async close() {
      stopping.abort();
      hold.abandonAll();
      await server.close();
    },
  };
}

/** Records every request the target receives, and how many are in flight at once. */
class RequestRecorder {
  readonly requests: RecordedRequest[] = [];
  inFlight = 0;
  maxInFlight = 0;
  private readonly routeByPath = new Map(ROUTE_NAMES.map((route) => [ROUTE_PATHS[route], route] as const));

  readonly middleware: RequestHandler = (request, response, next) => {
    this.inFlight += 1;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    const record: RecordedRequest = {
      route: this.routeByPath.get(request.path) ?? null,
      method: request.method,
      path: request.path,
      query: request.query,
      headers: request.headers,
      body: requestBodyText(request),
      contentType: request.headers['content-type'] ?? null,
      payment: request.header('X-PAYMENT') ?? null,
      receivedAtMs: Date.now(),
      status: null,
      paymentResponse: null,
    };
    this.requests.push(record);
    response.once('close', () => {
      this.inFlight -= 1;
      record.status = response.statusCode;
      const paymentResponse = response.getHeader('X-PAYMENT-RESPONSE');
      record.paymentResponse = typeof paymentResponse === 'string' ? paymentResponse : null;
    });
    next();
  };

  /** Forgets recorded requests and the concurrency maximum. */
  reset(): void {
    this.requests.length = 0;
    this.maxInFlight = this.inFlight;
  }
}

interface MountContext {
  config: TargetConfig;
  context: RouteContext;
  facilitatorUrl: string;
  solanaFeePayer: string;
  serveOwnPaidRoute: ReturnType<typeof createOwnLayer>;
}

/** Serves one route, free or behind its payment layer; returns its settings (url filled in later). */
function mountRoute(
  app: Express,
  route: RouteName,
  { config, context, facilitatorUrl, solanaFeePayer, serveOwnPaidRoute }: MountContext,
): Target['routes'][RouteName] {
  const settings = config.routes[route];
  const path = ROUTE_PATHS[route];
  const paid: PaidRoute | null =
    settings.priceMicroUsdc === null
      ? null
      : {
          path,
          network: settings.network,
          payTo: settings.payTo,
          priceMicroUsdc: settings.priceMicroUsdc,
          description: `${route} route of an x402 test target`,
        };
  const paymentLayer: PaymentLayerName | null = !paid
    ? null
    : (config.paymentLayer ?? (x402ExpressKnows(settings.network) ? 'x402-express' : 'own'));
  if (paymentLayer === 'x402-express' && !x402ExpressKnows(settings.network)) {
    throw new Error(`x402-express 1.2.0 does not know ${settings.network} (target ${config.name}, route ${route})`);
  }

  const produce = async (request: Request) => {
    // A target that never settles asks again for exactly what it was offered.
    if (route === 'neverSettles' && paid) {
      return {
        status: 402,
        body: paymentRequired('payment_not_accepted', [requirementsFor(paid, request, solanaFeePayer)]),
      };
    }
    return replyFor(route, request, context);
  };

  if (paid && paymentLayer === 'own') {
    app.all(path, (request, response, next) => {
      serveOwnPaidRoute(paid, request, response, () => produce(request)).catch(next);
    });
  } else {
    const handlers = paid ? [x402ExpressLayer(paid, facilitatorUrl)] : [];
    app.all(path, ...handlers, (request, response, next) => {
      produce(request)
        .then((reply) => response.status(reply.status).json(reply.body))
        .catch(next);
    });
  }
  return { ...settings, url: '', paymentLayer };
}
