// A fault-injecting HTTP proxy of our own, put in front of a peer (a JSON-RPC endpoint, a
// facilitator, a target) on 127.0.0.1. Each request is passed through or broken by the fault
// chosen for it: the connection dropped before any answer (the peer never sees the request), the
// request held past the caller's timeout and then passed on anyway (the peer acts after the caller
// gave up: a transaction broadcast late, a payment settled late), a 5xx, or a reset half-way
// through the body (after the peer has acted on the request). Tests choose the fault per request
// (a function of the request number, its headers and its body), and read how many requests met
// each fault.
import {
  createServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export type FaultKind = 'pass' | 'drop' | 'delay' | 'error5xx' | 'reset_mid_body';

export const FAULT_KINDS: readonly FaultKind[] = ['drop', 'delay', 'error5xx', 'reset_mid_body'];

export interface FaultRequest {
  /** 1 for the first request the proxy received. */
  index: number;
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

export interface FaultProxyOptions {
  /** Where requests go when they are passed on: `http://127.0.0.1:port`. */
  upstream: string;
  /** The fault for one request; `pass` when not given. */
  choose?: (request: FaultRequest) => FaultKind;
  /**
   * How long a delayed request is held before it is passed on (callers should time out first); it
   * reaches the peer even when its caller has gone, and its answer is written only if the caller is
   * still there.
   */
  delayMs?: number;
  /**
   * Runs before a request is passed on (after its fault is chosen), for a test to act on the peer
   * in between: for example to send a transaction of the same sender first, so that the one passed
   * on meets a nonce already taken.
   */
  beforeForward?: (request: FaultRequest) => Promise<void>;
}

export interface FaultProxy {
  url: string;
  /** Requests met, by fault. */
  counts: Record<FaultKind, number>;
  /** Requests received and not finished yet (a delayed one until it has been passed on). */
  inFlight(): number;
  /** Resolves once no request is in flight (delayed requests have reached the peer), at most timeoutMs. */
  idle(timeoutMs?: number): Promise<void>;
  /** Changes the fault chooser from the next request on. */
  setChooser(choose: (request: FaultRequest) => FaultKind): void;
  close(): Promise<void>;
}

const MAX_BODY_BYTES = 4 * 1024 * 1024;

function readBody(request: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    request.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        reject(new Error('request body too large for the fault proxy'));
        request.destroy();
        return;
      }
      chunks.push(chunk);
    });
    request.on('end', () => resolve(Buffer.concat(chunks)));
    request.on('error', reject);
  });
}

interface UpstreamAnswer {
  status: number;
  headers: Record<string, string | string[]>;
  body: Buffer;
}

function forward(upstream: URL, request: IncomingMessage, body: Buffer): Promise<UpstreamAnswer> {
  return new Promise((resolve, reject) => {
    const headers = { ...request.headers, host: upstream.host, 'content-length': String(body.length) };
    const outgoing = httpRequest(
      { host: upstream.hostname, port: upstream.port, method: request.method, path: request.url, headers },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => {
          const answerHeaders: Record<string, string | string[]> = {};
          for (const [name, value] of Object.entries(response.headers)) {
            if (value !== undefined && name !== 'content-length' && name !== 'transfer-encoding') {
              answerHeaders[name] = value;
            }
          }
          resolve({ status: response.statusCode ?? 502, headers: answerHeaders, body: Buffer.concat(chunks) });
        });
        response.on('error', reject);
      },
    );
    outgoing.on('error', reject);
    outgoing.end(body);
  });
}

export async function startFaultProxy(options: FaultProxyOptions): Promise<FaultProxy> {
  const upstream = new URL(options.upstream);
  const delayMs = options.delayMs ?? 10_000;
  let choose = options.choose ?? (() => 'pass' as const);
  const counts: Record<FaultKind, number> = { pass: 0, drop: 0, delay: 0, error5xx: 0, reset_mid_body: 0 };
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  let index = 0;
  let inFlight = 0;

  const handle = async (request: IncomingMessage, response: ServerResponse): Promise<void> => {
    const body = await readBody(request);
    index += 1;
    const seen: FaultRequest = {
      index,
      method: request.method ?? 'GET',
      path: request.url ?? '/',
      headers: request.headers,
      body,
    };
    const fault = choose(seen);
    counts[fault] += 1;
    if (fault !== 'drop' && fault !== 'error5xx') await options.beforeForward?.(seen);
    switch (fault) {
      case 'drop':
        // Nothing reaches the peer; the caller sees its connection closed without an answer.
        request.socket.destroy();
        return;
      case 'error5xx':
        response.writeHead(503, { 'content-type': 'text/plain' }).end('fault proxy: service unavailable');
        return;
      case 'delay': {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(() => {
            timers.delete(timer);
            resolve();
          }, delayMs);
          timers.add(timer);
        });
        // The peer acts late, whether or not the caller is still waiting.
        const answer = await forward(upstream, request, body);
        if (request.socket.destroyed) return;
        response.writeHead(answer.status, answer.headers).end(answer.body);
        return;
      }
      case 'reset_mid_body': {
        // The peer acts on the request; its answer is cut half-way.
        const answer = await forward(upstream, request, body);
        response.writeHead(answer.status, { ...answer.headers, 'content-length': String(answer.body.length) });
        response.write(answer.body.subarray(0, Math.floor(answer.body.length / 2)));
        setImmediate(() => request.socket.destroy());
        return;
      }
      case 'pass': {
        const answer = await forward(upstream, request, body);
        response.writeHead(answer.status, answer.headers).end(answer.body);
        return;
      }
    }
  };

  const server: Server = createServer((request, response) => {
    inFlight += 1;
    handle(request, response)
      .catch(() => {
        request.socket.destroy();
      })
      .finally(() => {
        inFlight -= 1;
      });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    counts,
    inFlight: () => inFlight,
    async idle(timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      while (inFlight > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
    },
    setChooser(next) {
      choose = next;
    },
    async close() {
      for (const timer of timers) clearTimeout(timer);
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
