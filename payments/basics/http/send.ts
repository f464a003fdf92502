import http from 'node:http';
import https from 'node:https';
import { isIP, type LookupFunction } from 'node:net';
import type { TargetConnections } from './connections';
import { fail, ok, type Result } from '../result';
import { OutboundError, outboundFailure, type OutboundErrorCode } from './errors';
import { checkUrl, systemResolver, type AllowHosts, type Resolver, type VettedTarget } from './guard';
import { PAYMENT_REQUEST_HEADERS, withoutHopByHop, type ResponseHeaders } from './headers';
import type { TargetMethod, TargetRequest } from './request';

export const DEFAULT_MAX_RESPONSE_BYTES = 10 * 1024 * 1024;
export const DEFAULT_MAX_REDIRECTS = 5;

/**
 * Opens one HTTP exchange; the default is node:http or node:https. Tests replace it to observe
 * where a connection would go. The options always carry `lookup`, which yields only the
 * addresses the guard vetted, and `agent`: the pool of that vetted destination, or false for a
 * new connection.
 */
export type Transport = (protocol: 'http:' | 'https:', options: https.RequestOptions) => http.ClientRequest;

export const nodeTransport: Transport = (protocol, options) =>
  protocol === 'https:' ? https.request(options) : http.request(options);

/** Methods a target must accept twice: the only ones sent again when a reused connection was already closed. */
const IDEMPOTENT_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE']);

export interface SendOptions {
  /** Bound on the whole call: name resolution, connect, headers, body, every redirect. */
  timeoutMs: number;
  /** The bound a timeout names (the caller's, of which timeoutMs is what is left); timeoutMs when absent. */
  boundMs?: number;
  /** From SSRF_ALLOW_HOSTS (parseAllowHosts); exempts exactly those host:port pairs. */
  allowHosts: AllowHosts;
  resolver?: Resolver;
  maxResponseBytes?: number;
  maxRedirects?: number;
  transport?: Transport;
  /** Reused connections (the service's own, Deps.connections); false opens a new one for every exchange. */
  connections: TargetConnections | false;
}

export interface TargetResponse {
  status: number;
  /** Lower-case names, hop-by-hop headers removed. */
  headers: ResponseHeaders;
  body: Buffer;
  /** The URL that answered, after redirects. */
  url: string;
}

/** The target's answer, or why there is none. */
export type TargetAnswer = Result<TargetResponse, OutboundErrorCode>;

const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
const BODY_HEADERS = ['content-type', 'content-encoding', 'content-language', 'content-location'];
const CREDENTIAL_HEADERS = ['authorization', 'cookie', ...PAYMENT_REQUEST_HEADERS];

interface Exchange {
  /** The bound a timeout names. */
  boundMs: number;
  signal: AbortSignal;
  maxResponseBytes: number;
  transport: Transport;
  connections: TargetConnections | false;
  /** Whether a response with this status and headers is a redirect we will follow (body skipped). */
  follows: (status: number, headers: ResponseHeaders) => boolean;
}

/**
 * Sends a built request to its target through the SSRF guard. Fails with ssrf_blocked, invalid_url,
 * unsupported_scheme (before anything is sent), too_many_redirects, timeout, unreachable,
 * malformed_response or response_too_large; rejects only for a timeoutMs that is not positive.
 */
export async function sendTargetRequest(request: TargetRequest, options: SendOptions): Promise<TargetAnswer> {
  const { timeoutMs, allowHosts } = options;
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0)
    throw new RangeError(`timeoutMs must be positive, got ${timeoutMs}`);
  const resolver = options.resolver ?? systemResolver;
  const maxRedirects = options.maxRedirects ?? DEFAULT_MAX_REDIRECTS;
  const deadline = new AbortController();
  const timer = setTimeout(() => deadline.abort(), timeoutMs);
  const exchange: Exchange = {
    boundMs: options.boundMs ?? timeoutMs,
    signal: deadline.signal,
    maxResponseBytes: options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES,
    transport: options.transport ?? nodeTransport,
    connections: options.connections,
    // With maxRedirects 0 a redirect is the answer, handed back as it came.
    follows: (status, headers) =>
      maxRedirects > 0 && REDIRECT_STATUSES.has(status) && typeof headers.location === 'string',
  };
  try {
    let current = request;
    for (let redirects = 0; ; redirects += 1) {
      const check = await beforeDeadline(checkUrl(current.url, resolver, allowHosts), exchange);
      if (!check.ok) return fail(check.reason, check.details);
      const response = await exchangeWithPool(check.value, current, exchange);
      if (!exchange.follows(response.status, response.headers)) return ok(response);
      if (redirects >= maxRedirects) {
        return fail('too_many_redirects', `target redirected more than ${maxRedirects} times`);
      }
      current = redirected(current, check.value.url, response);
    }
  } catch (error) {
    if (error instanceof OutboundError) return outboundFailure(error);
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

function beforeDeadline<T>(work: Promise<T>, exchange: Pick<Exchange, 'signal' | 'boundMs'>): Promise<T> {
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(timeoutError(exchange.boundMs));
    if (exchange.signal.aborted) {
      onAbort();
      return;
    }
    exchange.signal.addEventListener('abort', onAbort, { once: true });
    work.then(resolve, reject).finally(() => exchange.signal.removeEventListener('abort', onAbort));
  });
}

/** The next request of a redirect, as browsers build it (Fetch standard, HTTP-redirect fetch). */
function redirected(previous: TargetRequest, previousUrl: URL, response: TargetResponse): TargetRequest {
  let next: URL;
  try {
    next = new URL(response.headers.location as string, previousUrl);
  } catch {
    throw new OutboundError('malformed_response', 'target redirected to an invalid URL');
  }
  let headers = { ...previous.headers };
  let method: TargetMethod = previous.method;
  let body = previous.body;
  if (
    (response.status === 303 && method !== 'GET') ||
    ((response.status === 301 || response.status === 302) && method === 'POST')
  ) {
    method = 'GET';
    body = undefined;
    headers = withoutHeaders(headers, BODY_HEADERS);
  }
  if (next.origin !== previousUrl.origin) {
    headers = withoutHeaders(headers, CREDENTIAL_HEADERS);
  }
  return { url: next.href, method, headers, ...(body ? { body } : {}) };
}

function withoutHeaders(headers: Record<string, string>, names: readonly string[]): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).filter(([name]) => !names.includes(name)));
}

/** Resolves to `addresses` only, whatever the host: the connection cannot reach an unchecked address. */
function pinnedLookup(target: VettedTarget): LookupFunction {
  return (hostname, options, callback) => {
    const family = options.family === 4 || options.family === 6 ? options.family : 0;
    const candidates = target.addresses.filter((candidate) => family === 0 || candidate.family === family);
    const [first] = candidates;
    process.nextTick(() => {
      if (hostname !== target.hostname || first === undefined) {
        const error = Object.assign(new Error(`no vetted address for ${hostname}`), { code: 'ENOTFOUND' });
        callback(error, '');
      } else if (options.all) {
        callback(
          null,
          candidates.map(({ address, family }) => ({ address, family })),
        );
      } else {
        callback(null, first.address, first.family);
      }
    });
  };
}

/**
 * One exchange on a pooled connection. A reused connection that the target had already closed
 * (its keep-alive ended as we wrote) fails before any byte of an answer: an idempotent request is
 * then sent once more on a new connection; any other request reports the failure.
 */
async function exchangeWithPool(
  target: VettedTarget,
  request: TargetRequest,
  exchange: Exchange,
): Promise<TargetResponse> {
  const agent = exchange.connections ? exchange.connections.agentFor(target) : false;
  try {
    return await exchangeOnce(target, request, exchange, agent);
  } catch (error) {
    if (!(error instanceof StaleConnection)) throw error;
    if (!IDEMPOTENT_METHODS.has(request.method)) throw error.failure;
    return exchangeOnce(target, request, exchange, false);
  }
}

/** A reused connection failed before any answer arrived: the target closed it while it sat idle. */
class StaleConnection extends Error {
  constructor(readonly failure: OutboundError) {
    super(failure.message);
  }
}

function requestOptions(target: VettedTarget, request: TargetRequest, agent: http.Agent | false): https.RequestOptions {
  const headers: Record<string, string> = { ...request.headers, host: target.url.host };
  if (request.body) headers['content-length'] = String(request.body.length);
  else if (request.method !== 'GET' && request.method !== 'DELETE') headers['content-length'] = '0';
  return {
    protocol: target.url.protocol,
    hostname: target.hostname,
    port: target.port,
    path: `${target.url.pathname}${target.url.search}`,
    method: request.method,
    headers,
    agent,
    lookup: pinnedLookup(target),
    // The certificate is checked against the name, whatever address we connect to.
    ...(isIP(target.hostname) === 0 ? { servername: target.hostname } : {}),
  };
}

function exchangeOnce(
  target: VettedTarget,
  request: TargetRequest,
  exchange: Exchange,
  agent: http.Agent | false,
): Promise<TargetResponse> {
  return new Promise((resolve, reject) => {
    let settled = false;
    let connected = false;
    let answered = false;
    let outgoing: http.ClientRequest | undefined;
    const finish = (
      error: OutboundError | StaleConnection | null,
      response?: TargetResponse,
      { keepConnection = false } = {},
    ) => {
      if (settled) return;
      settled = true;
      exchange.signal.removeEventListener('abort', onAbort);
      // A response read to its end leaves its connection to the pool; anything else closes it.
      if (!keepConnection) outgoing?.destroy();
      if (error) reject(error);
      else resolve(response as TargetResponse);
    };
    const onAbort = () => finish(timeoutError(exchange.boundMs));
    if (exchange.signal.aborted) {
      onAbort();
      return;
    }
    exchange.signal.addEventListener('abort', onAbort, { once: true });

    try {
      outgoing = exchange.transport(target.url.protocol as 'http:' | 'https:', requestOptions(target, request, agent));
    } catch (cause) {
      finish(new OutboundError('invalid_header', 'the request cannot be sent as HTTP', { cause }));
      return;
    }
    const sent = outgoing;
    sent.on('socket', (socket) => {
      if (sent.reusedSocket) connected = true;
      else socket.once('connect', () => (connected = true));
    });
    sent.on('error', (error: Error & { code?: string }) => {
      const failure = requestFailure(error, connected, target);
      const closedWhileIdle = sent.reusedSocket && !answered && (error.code === 'ECONNRESET' || error.code === 'EPIPE');
      finish(closedWhileIdle ? new StaleConnection(failure) : failure);
    });
    sent.on('response', (incoming) => {
      answered = true;
      const headers = withoutHopByHop(incoming.headers);
      const status = incoming.statusCode ?? 0;
      const url = target.url.href;
      if (exchange.follows(status, headers)) {
        finish(null, { status, headers, body: Buffer.alloc(0), url });
        return;
      }
      readBody(incoming, exchange.maxResponseBytes).then(
        (body) => finish(null, { status, headers, body, url }, { keepConnection: true }),
        // readBody rejects with an OutboundError only.
        (error: unknown) => finish(error as OutboundError),
      );
    });
    sent.end(request.body);
  });
}

function readBody(incoming: http.IncomingMessage, maxBytes: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const tooLarge = () => new OutboundError('response_too_large', `target response is larger than ${maxBytes} bytes`);
    const declared = Number(incoming.headers['content-length']);
    if (declared > maxBytes) {
      reject(tooLarge());
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    incoming.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes) {
        incoming.destroy();
        reject(tooLarge());
      } else {
        chunks.push(chunk);
      }
    });
    incoming.on('end', () => resolve(Buffer.concat(chunks, size)));
    // A broken stream also closes incomplete; 'close' reports it once, as malformed_response.
    incoming.on('error', () => {});
    incoming.on('close', () => {
      if (!incoming.complete)
        reject(new OutboundError('malformed_response', 'target closed the connection before the whole body arrived'));
    });
  });
}

function requestFailure(error: Error & { code?: string }, connected: boolean, target: VettedTarget): OutboundError {
  if (error instanceof OutboundError) return error;
  const code = error.code ?? 'unknown';
  const where = target.url.host;
  if (code.startsWith('HPE_')) {
    return new OutboundError('malformed_response', `target ${where} sent an invalid HTTP response (${code})`, {
      cause: error,
    });
  }
  if (connected && (code === 'ECONNRESET' || code === 'EPIPE')) {
    return new OutboundError('malformed_response', `target ${where} closed the connection without an HTTP response`, {
      cause: error,
    });
  }
  return new OutboundError('unreachable', `target ${where} could not be reached (${code})`, { cause: error });
}

function timeoutError(timeoutMs: number): OutboundError {
  return new OutboundError('timeout', `target did not answer within ${timeoutMs} ms`);
}
