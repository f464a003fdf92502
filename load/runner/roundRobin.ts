/**
 * A tiny HTTP round-robin balancer on 127.0.0.1 in front of several service instances (the load
 * runner's stand-in for a deployment's load balancer): each request goes to the next instance in
 * turn, over keep-alive connections of its own, and its answer comes back with an `X-Upstream`
 * header naming the instance (host:port), as `add_header X-Upstream $upstream_addr always;` does
 * in nginx. A client that goes away takes its upstream request with it (the instance sees the
 * disconnect, as it would behind a real balancer).
 *
 * It counts per instance what it forwarded and how each answer began (status), and how many
 * requests are open there now; an upstream that cannot be reached is a 502 of the balancer's own
 * (counted as `failed`, never sent on to another instance: a POST may have been received).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface UpstreamCounts {
  /** host:port of the instance, as in X-Upstream. */
  upstream: string;
  forwarded: number;
  /** Answers by status, counted when the instance's response head arrives. */
  byStatus: Record<string, number>;
  /** Requests sent to the instance and not yet finished (or abandoned). */
  open: number;
  failed: number;
}

export interface RoundRobin {
  url: string;
  upstreams: string[];
  counts(): UpstreamCounts[];
  /** Sets every count to zero (open requests stay counted as open). */
  resetCounts(): void;
  close(): Promise<void>;
}

export const UPSTREAM_HEADER = 'x-upstream';

export async function startRoundRobin(instanceUrls: string[], port = 0): Promise<RoundRobin> {
  if (instanceUrls.length === 0) throw new Error('the round robin needs at least one instance');
  const upstreams = instanceUrls.map((url) => new URL(url));
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
  const counts: UpstreamCounts[] = upstreams.map((url) => ({
    upstream: url.host,
    forwarded: 0,
    byStatus: {},
    open: 0,
    failed: 0,
  }));
  let next = 0;

  const server = http.createServer((request, response) => {
    const index = next;
    next = (next + 1) % upstreams.length;
    const upstream = upstreams[index];
    const count = counts[index];
    if (upstream === undefined || count === undefined) throw new Error(`no upstream ${index}`);
    count.forwarded += 1;
    count.open += 1;
    let closed = false;
    const done = () => {
      if (closed) return;
      closed = true;
      count.open -= 1;
    };
    const outgoing = http.request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: request.method,
        path: request.url,
        headers: { ...request.headers, host: upstream.host, 'x-forwarded-for': request.socket.remoteAddress },
        agent,
      },
      (answer) => {
        const status = answer.statusCode ?? 0;
        count.byStatus[status] = (count.byStatus[status] ?? 0) + 1;
        const headers = { ...answer.headers, [UPSTREAM_HEADER]: upstream.host };
        response.writeHead(status, headers);
        answer.pipe(response);
        answer.once('end', done);
        answer.once('error', () => {
          done();
          response.destroy();
        });
      },
    );
    outgoing.once('error', () => {
      done();
      if (response.headersSent) {
        response.destroy();
        return;
      }
      count.failed += 1;
      response.writeHead(502, { 'content-type': 'application/json', [UPSTREAM_HEADER]: upstream.host });
      response.end(JSON.stringify({ error: 'Bad Gateway', details: `the balancer could not reach ${upstream.host}` }));
    });
    // The client went away before its answer ended: so does the upstream request.
    response.once('close', () => {
      if (!response.writableFinished) outgoing.destroy();
      done();
    });
    request.pipe(outgoing);
  });
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  const { port: listening } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${listening}`,
    upstreams: counts.map((count) => count.upstream),
    counts: () => counts.map((count) => ({ ...count, byStatus: { ...count.byStatus } })),
    resetCounts() {
      for (const count of counts) {
        count.forwarded = 0;
        count.byStatus = {};
        count.failed = 0;
      }
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
        agent.destroy();
      }),
  };
}
