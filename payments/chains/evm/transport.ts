/**
 * The JSON-RPC transport of our EVM clients: viem's transport contract over node:http with a
 * keep-alive pool, instead of viem's http transport over fetch. The answers and errors are viem's
 * own (RpcRequestError for a JSON-RPC error, HttpRequestError for a failed or non-2xx exchange,
 * TimeoutError after `timeout`), so every caller reads them as before; the work per request is a
 * quarter of fetch's (web streams, Headers, a Request per call), measured by `npm run bench`.
 *
 * No retries (a revert is an answer), one timeout per request covering the whole answer, a bound on
 * the size of an answer, and each request's time reported to the observer.
 *
 * Requests made in the same turn of the event loop (a verification's four reads) go out as one
 * JSON-RPC batch, at most MAX_BATCH to an exchange, each answered by its own result or error; a lone
 * request goes out as before. A node that answers a batch with anything but an array of answers
 * (it does not take batches) is sent each request on its own, and no more batches.
 */
import type http from 'node:http';
import {
  createTransport,
  HttpRequestError,
  RpcRequestError,
  TimeoutError,
  type EIP1193RequestFn,
  type Transport,
} from 'viem';
import type { NetworkName } from '../../basics/networkTable';
import { observed, type RpcObserver } from '../rpcTiming';
import { keepAliveAgent, keepAliveExchange } from '../../basics/http/keepAlive';

/** The largest JSON-RPC answer read (a wide eth_getLogs fits): as viem's default. */
export const MAX_RPC_RESPONSE_BYTES = 10 * 1024 * 1024;

/** Sockets kept open per RPC endpoint. */
const MAX_SOCKETS = 64;

/** A reused connection that failed before any answer: the node closed it while it sat idle. */
class ClosedWhileIdle extends Error {}

/** The request as viem's errors carry it. */
type RpcBody = Record<string, unknown> & { jsonrpc: '2.0'; id: number; method: string; params?: unknown };

interface RpcAnswer {
  id?: number;
  result?: unknown;
  error?: { code: number; message: string; data?: unknown };
}

/** The most requests sent in one batch. */
export const MAX_BATCH = 10;

let nextId = 0;

/** JSON with bigints as decimal strings (viem hex-encodes its parameters; this only guards the rest). */
function bodyText(body: RpcBody | RpcBody[]): string {
  return JSON.stringify(body, (_key, value: unknown) => (typeof value === 'bigint' ? value.toString() : value));
}

/**
 * The endpoint as errors name it: scheme and host only. An RPC URL often carries an API key in its
 * path or query, or credentials, and viem's errors keep the URL they are given, in their message
 * and as a field that the logs print.
 */
function shownEndpoint(endpoint: URL): string {
  return `${endpoint.protocol}//${endpoint.host}`;
}

/** One POST of a JSON-RPC body; the parsed answer and its status, or a viem error. */
async function exchange(
  endpoint: URL,
  agent: http.Agent,
  body: RpcBody | RpcBody[],
  timeoutMs: number,
): Promise<{ status: number; answer: unknown }> {
  const url = shownEndpoint(endpoint);
  const payload = bodyText(body);
  const outcome = await keepAliveExchange(endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
    body: payload,
    agent,
    timeoutMs,
    maxBytes: MAX_RPC_RESPONSE_BYTES,
  });
  switch (outcome.kind) {
    case 'answered': {
      const { status } = outcome;
      const text = outcome.body.toString('utf8');
      try {
        return { status, answer: JSON.parse(text || '{}') as unknown };
      } catch {
        throw new HttpRequestError({
          body,
          url,
          status,
          details: status >= 200 && status < 300 ? 'the answer is not JSON' : text.slice(0, 500) || String(status),
        });
      }
    }
    case 'too_large':
      throw new HttpRequestError({
        body,
        url,
        status: outcome.status,
        details: `the answer is larger than ${MAX_RPC_RESPONSE_BYTES} bytes`,
      });
    case 'timed_out':
      throw new TimeoutError({ body, url });
    case 'closed_while_idle':
      throw new ClosedWhileIdle(outcome.error.message);
    case 'failed':
      throw new HttpRequestError({ body, url, cause: outcome.error, details: outcome.error.message });
  }
}

/** viem's transport for one RPC endpoint, with each request reported to `observe` under `network`. */
export function rpcTransport(
  rpcUrl: string,
  { timeout, network, observe }: { timeout: number; network: NetworkName; observe?: RpcObserver | undefined },
): Transport {
  const endpoint = new URL(rpcUrl);
  const agent = keepAliveAgent(endpoint.protocol, MAX_SOCKETS);
  // Sent once more on a new connection when a reused one had been closed by the node: every
  // request we send may be repeated (reads, and a signed transaction, which is the same one).
  const post = (body: RpcBody | RpcBody[]) =>
    exchange(endpoint, agent, body, timeout).catch((error: unknown) => {
      if (!(error instanceof ClosedWhileIdle)) throw error;
      return exchange(endpoint, agent, body, timeout).catch((again: unknown) => {
        if (again instanceof ClosedWhileIdle)
          throw new HttpRequestError({ body, url: shownEndpoint(endpoint), cause: again, details: again.message });
        throw again;
      });
    });
  /** An exchange whose answer does not answer `body`. */
  const unanswered = (body: RpcBody, status: number, details: string) =>
    new HttpRequestError({ body, url: shownEndpoint(endpoint), status, details });
  /** One request's answer as viem reads it: its result, or the error it stands for. */
  const resultOf = (body: RpcBody, status: number, answer: unknown): unknown => {
    const read = (answer ?? {}) as RpcAnswer;
    if (read.error) throw new RpcRequestError({ body, error: read.error, url: shownEndpoint(endpoint), status });
    if (status < 200 || status >= 300) throw unanswered(body, status, JSON.stringify(answer).slice(0, 500));
    return read.result;
  };
  const sendOne = async (body: RpcBody): Promise<unknown> => {
    const { status, answer } = await post(body);
    return resultOf(body, status, answer);
  };

  interface Waiting {
    body: RpcBody;
    resolve: (value: unknown) => void;
    reject: (error: unknown) => void;
  }
  let waiting: Waiting[] = [];
  let batches = true;
  const sendBatch = async (group: Waiting[]): Promise<void> => {
    const bodies = group.map((each) => each.body);
    let status: number;
    let answer: unknown;
    try {
      ({ status, answer } = await post(bodies));
    } catch (error) {
      for (const each of group) each.reject(error);
      return;
    }
    if (!Array.isArray(answer)) {
      if ((status >= 200 && status < 300) || status === 400) {
        // Not an answer to a batch: this node takes single requests only.
        batches = false;
        for (const each of group) sendOne(each.body).then(each.resolve, each.reject);
        return;
      }
      for (const each of group) each.reject(unanswered(each.body, status, JSON.stringify(answer).slice(0, 500)));
      return;
    }
    const byId = new Map<unknown, unknown>();
    for (const item of answer as unknown[]) byId.set((item as RpcAnswer | null)?.id, item);
    for (const each of group) {
      if (!byId.has(each.body.id)) {
        each.reject(unanswered(each.body, status, 'the batch answer has no answer to this request'));
        continue;
      }
      try {
        each.resolve(resultOf(each.body, status, byId.get(each.body.id)));
      } catch (error) {
        each.reject(error);
      }
    }
  };
  const flush = () => {
    const all = waiting;
    waiting = [];
    for (let start = 0; start < all.length; start += MAX_BATCH) {
      const group = all.slice(start, start + MAX_BATCH);
      const [only] = group;
      if (group.length === 1 && only) sendOne(only.body).then(only.resolve, only.reject);
      else void sendBatch(group);
    }
  };
  const send = ({ method, params }: { method: string; params?: unknown }): Promise<unknown> => {
    nextId = (nextId + 1) % Number.MAX_SAFE_INTEGER;
    const body: RpcBody = { jsonrpc: '2.0', id: nextId, method, ...(params === undefined ? {} : { params }) };
    if (!batches) return sendOne(body);
    return new Promise((resolve, reject) => {
      waiting.push({ body, resolve, reject });
      // The other requests of this turn join it; the exchange leaves before the next turn's I/O.
      if (waiting.length === 1) setImmediate(flush);
    });
  };
  const request = (async (args: { method: string; params?: unknown }) =>
    observed(observe, network, args.method, () => send(args))) as EIP1193RequestFn;
  // The retry count and timeout a client passes are ignored: ours are fixed above.
  return () =>
    createTransport(
      { key: 'http', name: 'HTTP JSON-RPC', request, retryCount: 0, timeout, type: 'http' },
      { url: shownEndpoint(endpoint) },
    );
}
