/**
 * The EVM clients' JSON-RPC transport (payments/networks/evm/transport.ts) against a local HTTP
 * server that answers as nodes do, and as failing ones do: the answers and errors are viem's, so
 * the callers' readings (rpc_unavailable, rpc_timeout, revert reasons) stay what they were.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BaseError, createPublicClient, encodeErrorResult, HttpRequestError, parseAbi, RpcRequestError } from 'viem';
import { isRpcUnavailable } from '../../payments/incoming/evm';
import { readFailure, revertReason } from '../../payments/networks/evm/errors';
import { MAX_RPC_RESPONSE_BYTES, rpcTransport } from '../../payments/networks/evm/transport';

interface Seen {
  method: string;
  ok: boolean;
}

let server: http.Server;
let url: string;
const bodies: Array<Record<string, unknown>> = [];
const authorizations: Array<string | undefined> = [];

const revertData = encodeErrorResult({
  abi: parseAbi(['error Error(string)']),
  errorName: 'Error',
  args: ['FiatTokenV2: authorization is used or canceled'],
});

beforeAll(async () => {
  server = http.createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { id: number; method: string };
      bodies.push(body);
      authorizations.push(request.headers.authorization);
      const json = (status: number, value: unknown) => {
        const text = JSON.stringify(value);
        response.writeHead(status, { 'content-type': 'application/json' });
        response.end(text);
      };
      switch (body.method) {
        case 'eth_blockNumber':
          json(200, { jsonrpc: '2.0', id: body.id, result: '0x2a' });
          return;
        case 'eth_call':
          json(200, {
            jsonrpc: '2.0',
            id: body.id,
            error: { code: 3, message: 'execution reverted', data: revertData },
          });
          return;
        case 'eth_chainId':
          response.writeHead(503, { 'content-type': 'text/plain' });
          response.end('upstream unavailable');
          return;
        case 'eth_gasPrice':
          // Never answers in time.
          setTimeout(() => json(200, { jsonrpc: '2.0', id: body.id, result: '0x1' }), 2_000);
          return;
        case 'eth_getBalance':
          response.writeHead(200, { 'content-type': 'application/json' });
          response.end(`{"jsonrpc":"2.0","id":${body.id},"result":"${'0'.repeat(MAX_RPC_RESPONSE_BYTES)}"}`);
          return;
        case 'eth_getCode':
          response.writeHead(200, { 'content-type': 'text/html' });
          response.end('<html>not a node</html>');
          return;
        default:
          json(200, { jsonrpc: '2.0', id: body.id, error: { code: -32601, message: 'method not found' } });
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/rpc`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

function client(seen: Seen[] = [], endpoint = url) {
  return createPublicClient({
    transport: rpcTransport(endpoint, {
      timeout: 300,
      network: 'base-sepolia',
      observe: (_network, method, _seconds, ok) => seen.push({ method, ok }),
    }),
  });
}

async function failureOf(promise: Promise<unknown>): Promise<BaseError> {
  const error = await promise.then(
    () => undefined,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(BaseError);
  return error as BaseError;
}

describe('the JSON-RPC transport of the EVM clients', () => {
  it('sends a JSON-RPC 2.0 request and returns its result, reporting the method to the observer', async () => {
    const seen: Seen[] = [];
    expect(await client(seen).getBlockNumber({ cacheTime: 0 })).toBe(42n);
    const body = bodies.at(-1);
    expect(body).toMatchObject({ jsonrpc: '2.0', method: 'eth_blockNumber' });
    expect(typeof body?.id).toBe('number');
    expect(seen).toEqual([{ method: 'eth_blockNumber', ok: true }]);
  });

  it('keeps the revert reason a node sends with a JSON-RPC error', async () => {
    const seen: Seen[] = [];
    const error = await failureOf(client(seen).call({ to: '0x036CbD53842c5426634e7929541eC2318f3dCF7e', data: '0x' }));
    expect(error.walk((cause) => cause instanceof RpcRequestError)).not.toBeNull();
    expect(revertReason(error)).toBe('FiatTokenV2: authorization is used or canceled');
    expect(isRpcUnavailable(error)).toBe(false);
    expect(seen).toEqual([{ method: 'eth_call', ok: false }]);
  });

  it('reads a 5xx answer as an unavailable endpoint, not as a refusal', async () => {
    const error = await failureOf(client().getChainId());
    expect(error.walk((cause) => cause instanceof HttpRequestError)).not.toBeNull();
    expect(isRpcUnavailable(error)).toBe(true);
    expect(readFailure(error).reason).toBe('rpc_error');
  });

  it('gives up after the timeout with viem TimeoutError', async () => {
    const startedAt = performance.now();
    const error = await failureOf(client().getGasPrice());
    expect(performance.now() - startedAt).toBeLessThan(1_900);
    expect(readFailure(error)).toMatchObject({ reason: 'rpc_timeout' });
    expect(isRpcUnavailable(error)).toBe(true);
  });

  it('refuses an answer larger than its bound', async () => {
    const error = await failureOf(client().getBalance({ address: '0x036CbD53842c5426634e7929541eC2318f3dCF7e' }));
    expect(isRpcUnavailable(error)).toBe(true);
    expect(error.message).toContain(`larger than ${MAX_RPC_RESPONSE_BYTES} bytes`);
  });

  it('reads an answer that is not JSON as an unavailable endpoint', async () => {
    const error = await failureOf(client().getCode({ address: '0x036CbD53842c5426634e7929541eC2318f3dCF7e' }));
    expect(isRpcUnavailable(error)).toBe(true);
  });

  it('reads a refused connection as an unavailable endpoint', async () => {
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const error = await failureOf(client([], `http://127.0.0.1:${port}/`).getBlockNumber({ cacheTime: 0 }));
    expect(isRpcUnavailable(error)).toBe(true);
  });

  it('sends a request again on a new connection when the node closed the reused one, and only then', async () => {
    // A node that drops a connection at its second request, as one closing it while idle does.
    const perSocket = new WeakMap<object, number>();
    let answered = 0;
    const dropping = http.createServer((request, response) => {
      const seen = (perSocket.get(request.socket) ?? 0) + 1;
      perSocket.set(request.socket, seen);
      request.resume();
      request.on('end', () => {
        if (seen > 1) {
          request.socket.destroy();
          return;
        }
        answered += 1;
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(JSON.stringify({ jsonrpc: '2.0', id: 1, result: '0x7' }));
      });
    });
    await new Promise<void>((resolve) => dropping.listen(0, '127.0.0.1', resolve));
    try {
      const endpoint = `http://127.0.0.1:${(dropping.address() as AddressInfo).port}/`;
      const seen: Seen[] = [];
      const reader = client(seen, endpoint);
      for (let index = 0; index < 3; index += 1) expect(await reader.getBlockNumber({ cacheTime: 0 })).toBe(7n);
      expect(answered).toBe(3);
      expect(seen.map((entry) => entry.ok)).toEqual([true, true, true]);

      // A new connection reset before any answer is not sent again: the node is failing.
      const failing = http.createServer((request) => request.socket.destroy());
      await new Promise<void>((resolve) => failing.listen(0, '127.0.0.1', resolve));
      let requests = 0;
      failing.on('request', () => (requests += 1));
      try {
        const failingUrl = `http://127.0.0.1:${(failing.address() as AddressInfo).port}/`;
        const error = await failureOf(client([], failingUrl).getBlockNumber({ cacheTime: 0 }));
        expect(isRpcUnavailable(error)).toBe(true);
        expect(requests).toBe(1);
      } finally {
        await new Promise((resolve) => failing.close(resolve));
      }
    } finally {
      dropping.closeAllConnections();
      await new Promise((resolve) => dropping.close(resolve));
    }
  });

  it('sends the credentials of the URL as Basic authorization', async () => {
    const withCredentials = url.replace('http://', 'http://reader:s%40cret@');
    expect(await client([], withCredentials).getBlockNumber({ cacheTime: 0 })).toBe(42n);
    expect(authorizations.at(-1)).toBe(`Basic ${Buffer.from('reader:s@cret').toString('base64')}`);
  });
});
