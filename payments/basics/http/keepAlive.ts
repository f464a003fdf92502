/**
 * One HTTP exchange over node:http on a keep-alive agent, as our JSON-RPC transport
 * (networks/evm/transport.ts) and the facilitator client (incoming/facilitator.ts) make them: one
 * timer bounds the whole answer, an answer past `maxBytes` is not read further, and the outcome
 * says what happened, for each caller to give its own errors (viem's for the transport). It never
 * rejects, never follows a redirect and never sends a request twice: whether one may be sent again
 * is the caller's to decide (`closed_while_idle`).
 *
 * Targets of /proxy and /relay go through ./send.ts instead: its guard vets each address first.
 */
import http from 'node:http';
import https from 'node:https';

/**
 * An idle socket is closed after this long: below the 5 s a Node server keeps an idle connection
 * by default (keepAliveTimeout), so a request rarely goes out on a connection the peer is closing.
 */
export const IDLE_SOCKET_MS = 4_000;

/** A keep-alive pool for one protocol: the most recently used socket first, idle ones closed after IDLE_SOCKET_MS. */
export function keepAliveAgent(protocol: string, maxSockets: number): http.Agent {
  // `timeout` applies to idle sockets; an exchange's own timer bounds a busy one.
  const options = { keepAlive: true, maxSockets, timeout: IDLE_SOCKET_MS, scheduling: 'lifo' as const };
  return protocol === 'https:' ? new https.Agent(options) : new http.Agent(options);
}

export type ExchangeOutcome =
  | { kind: 'answered'; status: number; body: Buffer }
  /** The answer grew past maxBytes: the rest was not read. */
  | { kind: 'too_large'; status: number }
  | { kind: 'timed_out' }
  /** A reused connection failed before any answer: the peer closed it while it sat idle, so the request never reached it. */
  | { kind: 'closed_while_idle'; error: Error }
  /** The connection or the answer failed. */
  | { kind: 'failed'; error: Error };

export interface ExchangeRequest {
  method: 'GET' | 'POST';
  headers: http.OutgoingHttpHeaders;
  body?: string;
  agent: http.Agent;
  timeoutMs: number;
  maxBytes: number;
}

/** One exchange with `url` (credentials in it become the Authorization header, as node:http reads them). */
export function keepAliveExchange(url: URL, init: ExchangeRequest): Promise<ExchangeOutcome> {
  const client = url.protocol === 'https:' ? https : http;
  return new Promise((resolve) => {
    let settled = false;
    let answered = false;
    const finish = (outcome: ExchangeOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(outcome);
    };
    const request = client.request(
      url,
      { method: init.method, headers: init.headers, agent: init.agent },
      (response) => {
        answered = true;
        const status = response.statusCode ?? 0;
        const chunks: Buffer[] = [];
        let size = 0;
        response.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > init.maxBytes) {
            response.destroy();
            finish({ kind: 'too_large', status });
            return;
          }
          chunks.push(chunk);
        });
        response.on('error', (error) => finish({ kind: 'failed', error }));
        response.on('end', () => finish({ kind: 'answered', status, body: Buffer.concat(chunks, size) }));
      },
    );
    const timer = setTimeout(() => {
      request.destroy();
      finish({ kind: 'timed_out' });
    }, init.timeoutMs);
    request.on('error', (error: NodeJS.ErrnoException) => {
      const idleClose = request.reusedSocket && !answered && (error.code === 'ECONNRESET' || error.code === 'EPIPE');
      finish(idleClose ? { kind: 'closed_while_idle', error } : { kind: 'failed', error });
    });
    request.end(init.body);
  });
}
