// payments/basics/http/keepAlive.ts: the one exchange our JSON-RPC transport and facilitator client
// make. Each outcome (answered, too large, timed out, a reused connection the peer had closed, a
// connection that failed) is told apart; nothing is sent twice; the connection is kept for the next.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { keepAliveAgent, keepAliveExchange, type ExchangeRequest } from '../../payments/basics/http/keepAlive';

const servers: http.Server[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

async function serve(handler: http.RequestListener): Promise<URL> {
  const server = http.createServer(handler);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/rpc`);
}

function request(agent: http.Agent, overrides: Partial<ExchangeRequest> = {}): ExchangeRequest {
  return { method: 'POST', headers: {}, body: 'ping', agent, timeoutMs: 2_000, maxBytes: 1_024, ...overrides };
}

describe('keepAliveExchange', () => {
  it('answers with the status and body, on one kept connection for successive exchanges', async () => {
    const sockets = new Set<unknown>();
    const received: string[] = [];
    const url = await serve((incoming, response) => {
      sockets.add(incoming.socket);
      let body = '';
      incoming.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
      incoming.on('end', () => {
        received.push(`${incoming.method} ${incoming.url} ${body}`);
        response.writeHead(201, { 'content-type': 'text/plain' });
        response.end(`pong ${received.length}`);
      });
    });
    const agent = keepAliveAgent('http:', 4);
    try {
      const first = await keepAliveExchange(url, request(agent));
      const second = await keepAliveExchange(url, request(agent));
      expect(first).toEqual({ kind: 'answered', status: 201, body: Buffer.from('pong 1') });
      expect(second).toEqual({ kind: 'answered', status: 201, body: Buffer.from('pong 2') });
      expect(received).toEqual(['POST /rpc ping', 'POST /rpc ping']);
      expect(sockets.size).toBe(1);
    } finally {
      agent.destroy();
    }
  });

  it('stops reading an answer past maxBytes', async () => {
    const url = await serve((_incoming, response) => {
      response.writeHead(200);
      response.end('x'.repeat(4_096));
    });
    const agent = keepAliveAgent('http:', 4);
    try {
      expect(await keepAliveExchange(url, request(agent, { maxBytes: 1_024 }))).toEqual({
        kind: 'too_large',
        status: 200,
      });
    } finally {
      agent.destroy();
    }
  });

  it('gives up at its timeout', async () => {
    const url = await serve(() => {
      // Never answers.
    });
    const agent = keepAliveAgent('http:', 4);
    try {
      expect(await keepAliveExchange(url, request(agent, { timeoutMs: 100 }))).toEqual({ kind: 'timed_out' });
    } finally {
      agent.destroy();
    }
  });

  it('tells a reused connection the peer had closed from a new one that failed, and sends neither again', async () => {
    // A peer that drops every connection at its second request, as one closing it while idle does.
    const perSocket = new WeakMap<object, number>();
    let requests = 0;
    const url = await serve((incoming, response) => {
      requests += 1;
      const seen = (perSocket.get(incoming.socket) ?? 0) + 1;
      perSocket.set(incoming.socket, seen);
      incoming.resume();
      incoming.on('end', () => {
        if (seen > 1) {
          incoming.socket.destroy();
          return;
        }
        response.end('first');
      });
    });
    const agent = keepAliveAgent('http:', 4);
    try {
      expect((await keepAliveExchange(url, request(agent))).kind).toBe('answered');
      const reused = await keepAliveExchange(url, request(agent));
      expect(reused.kind).toBe('closed_while_idle');
      expect(requests).toBe(2);

      let failingRequests = 0;
      const failing = await serve((incoming) => {
        failingRequests += 1;
        incoming.socket.destroy();
      });
      const fresh = await keepAliveExchange(failing, request(agent));
      expect(fresh.kind).toBe('failed');
      expect(failingRequests).toBe(1);
      expect(requests).toBe(2);
    } finally {
      agent.destroy();
    }
  });

  it('fails when nothing listens', async () => {
    const url = await serve(() => undefined);
    const closed = servers.pop();
    await new Promise((resolve) => closed?.close(resolve));
    const agent = keepAliveAgent('http:', 4);
    try {
      const outcome = await keepAliveExchange(url, request(agent));
      expect(outcome.kind).toBe('failed');
      expect(outcome.kind === 'failed' ? (outcome.error as NodeJS.ErrnoException).code : undefined).toBe(
        'ECONNREFUSED',
      );
    } finally {
      agent.destroy();
    }
  });
});
