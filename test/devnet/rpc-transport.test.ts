/**
 * The EVM clients' JSON-RPC transport (payments/chains/evm/transport.ts) against a local HTTP
 * server that answers as nodes do, and as failing ones do: the answers and errors are viem's, so
 * the callers' readings (rpc_unavailable, rpc_timeout, revert reasons) stay what they were.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BaseError, createPublicClient, encodeErrorResult, HttpRequestError, parseAbi, RpcRequestError } from 'viem';
import { isRpcUnavailable } from '../../payments/chains/evm/errors';
import { readFailure, revertReason } from '../../payments/chains/evm/errors';
import { MAX_BATCH, MAX_RPC_RESPONSE_BYTES, rpcTransport } from '../../payments/chains/evm/transport';

interface Seen {
  method: string;
  ok: boolean;
}

let server: http.Server;
let url: string;
const bodies: Array<Record<string, unknown>> = [];
/** The methods of each batch the node received, in order. */
const batches: string[][] = [];
const authorizations: Array<string | undefined> = [];

const revertData = encodeErrorResult({
  abi: parseAbi(['error Error(string)']),
  errorName: 'Error',
  args: ['FiatTokenV2: authorization is used or canceled'],
});

interface RpcCall {
  id: number;
  method: string;
}

interface Answer {
  status: number;
  contentType: string;
  json?: unknown;
  text?: string;
  delayMs?: number;
}

/** How the local node answers one request, as real nodes and failing ones do. */
function answerOf(body: RpcCall): Answer {
  const json = (value: unknown): Answer => ({ status: 200, contentType: 'application/json', json: value });
  switch (body.method) {
    case 'eth_blockNumber':
      return json({ jsonrpc: '2.0', id: body.id, result: '0x2a' });
    case 'eth_call':
      return json({ jsonrpc: '2.0', id: body.id, error: { code: 3, message: 'execution reverted', data: revertData } });
    case 'eth_chainId':
      return { status: 503, contentType: 'text/plain', text: 'upstream unavailable' };
    case 'eth_gasPrice':
      // Never answers in time.
      return { ...json({ jsonrpc: '2.0', id: body.id, result: '0x1' }), delayMs: 2_000 };
    case 'eth_getBalance':
      return {
        status: 200,
        contentType: 'application/json',
        text: `{"jsonrpc":"2.0","id":${body.id},"result":"${'0'.repeat(MAX_RPC_RESPONSE_BYTES)}"}`,
      };
    case 'eth_getCode':
      return { status: 200, contentType: 'text/html', text: '<html>not a node</html>' };
    default:
      return json({ jsonrpc: '2.0', id: body.id, error: { code: -32601, message: 'method not found' } });
  }
}

beforeAll(async () => {
  server = http.createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const parsed = JSON.parse(Buffer.concat(chunks).toString('utf8')) as RpcCall | RpcCall[];
      authorizations.push(request.headers.authorization);
      if (Array.isArray(parsed)) {
        batches.push(parsed.map((call) => call.method));
        for (const call of parsed) bodies.push({ ...call });
        // A batch: every element answered as it would be alone, in one array.
        const answers = parsed.map((call) => answerOf(call));
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(JSON.stringify(answers.map((answer) => answer.json)));
        return;
      }
      bodies.push({ ...parsed });
      const answer = answerOf(parsed);
      const send = () => {
        response.writeHead(answer.status, { 'content-type': answer.contentType });
        response.end(answer.text ?? JSON.stringify(answer.json));
      };
      if (answer.delayMs) setTimeout(send, answer.delayMs);
      else send();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/rpc`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

function client(seen: Seen[] = [], endpoint = url, timeout = 300) {
  return createPublicClient({
    transport: rpcTransport(endpoint, {
      timeout,
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
    // The endpoint never answers: any end is the timeout's (generous: a loaded machine is slow, not wrong).
    expect(performance.now() - startedAt).toBeLessThan(30_000);
    expect(readFailure(error)).toMatchObject({ reason: 'rpc_timeout' });
    expect(isRpcUnavailable(error)).toBe(true);
  });

  it('refuses an answer larger than its bound', async () => {
    // Time enough to send 10 MiB on a loaded machine: the bound, not the timeout, must end it.
    const reader = client([], url, 10_000);
    const error = await failureOf(reader.getBalance({ address: '0x036CbD53842c5426634e7929541eC2318f3dCF7e' }));
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

  it('names the endpoint by scheme and host only in its errors, which the logs print', async () => {
    // An RPC URL often carries an API key in its path or query, or credentials.
    const secretUrl = url.replace('http://', 'http://reader:S3CRETpw@') + 'v2/S3CRETpw?key=S3CRETpw';
    const error = await failureOf(client([], secretUrl).getChainId());
    expect(isRpcUnavailable(error)).toBe(true);
    const logged = JSON.stringify(Object.assign({}, error, { message: error.message, stack: error.stack }));
    expect(logged).toContain(new URL(url).host);
    expect(logged).not.toContain('S3CRETpw');
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

  it('sends the requests of one turn as one batch, each answered by its own result or error', async () => {
    const seen: Seen[] = [];
    const reader = client(seen);
    batches.length = 0;
    const [number, reverted, unknown] = await Promise.allSettled([
      reader.getBlockNumber({ cacheTime: 0 }),
      reader.call({ to: '0x0000000000000000000000000000000000000001', data: '0x' }),
      reader.request({ method: 'web3_clientVersion' }),
    ]);
    expect(batches).toEqual([['eth_blockNumber', 'eth_call', 'web3_clientVersion']]);
    expect(number).toEqual({ status: 'fulfilled', value: 42n });
    expect(reverted.status).toBe('rejected');
    if (reverted.status === 'rejected')
      expect(revertReason(reverted.reason)).toBe('FiatTokenV2: authorization is used or canceled');
    expect(unknown.status).toBe('rejected');
    if (unknown.status === 'rejected') {
      expect((unknown.reason as BaseError).walk((cause) => cause instanceof RpcRequestError)).not.toBeNull();
      expect(isRpcUnavailable(unknown.reason)).toBe(false);
    }
    expect(seen).toEqual([
      { method: 'eth_blockNumber', ok: true },
      { method: 'eth_call', ok: false },
      { method: 'web3_clientVersion', ok: false },
    ]);
    // A lone request is sent alone.
    expect(await reader.getBlockNumber({ cacheTime: 0 })).toBe(42n);
    expect(batches).toHaveLength(1);
  });

  it(`sends at most ${MAX_BATCH} requests in a batch`, async () => {
    const reader = client();
    batches.length = 0;
    const numbers = await Promise.all(
      Array.from({ length: MAX_BATCH * 2 + 1 }, () => reader.request({ method: 'eth_blockNumber' })),
    );
    expect(numbers).toEqual(Array.from({ length: MAX_BATCH * 2 + 1 }, () => '0x2a'));
    // Two full batches; the last request alone.
    expect(batches.map((batch) => batch.length)).toEqual([MAX_BATCH, MAX_BATCH]);
  });

  it('sends each request on its own, then no more batches, to a node that does not take batches', async () => {
    const received: unknown[] = [];
    const single = http.createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as RpcCall | RpcCall[];
        received.push(body);
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(
          JSON.stringify(
            Array.isArray(body)
              ? { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'batches are not supported' } }
              : { jsonrpc: '2.0', id: body.id, result: '0x9' },
          ),
        );
      });
    });
    await new Promise<void>((resolve) => single.listen(0, '127.0.0.1', resolve));
    try {
      const reader = client([], `http://127.0.0.1:${(single.address() as AddressInfo).port}/`);
      const twice = () =>
        Promise.all([reader.request({ method: 'eth_blockNumber' }), reader.request({ method: 'eth_chainId' })]);
      expect(await twice()).toEqual(['0x9', '0x9']);
      expect(received.map((body) => Array.isArray(body))).toEqual([true, false, false]);
      expect(await twice()).toEqual(['0x9', '0x9']);
      expect(received.map((body) => Array.isArray(body))).toEqual([true, false, false, false, false]);
    } finally {
      single.closeAllConnections();
      await new Promise((resolve) => single.close(resolve));
    }
  });

  it('fails every request of a batch the node answers with a server error, as unavailable', async () => {
    const failing = http.createServer((request, response) => {
      request.resume();
      request.on('end', () => {
        response.writeHead(502, { 'content-type': 'text/plain' });
        response.end('bad gateway');
      });
    });
    await new Promise<void>((resolve) => failing.listen(0, '127.0.0.1', resolve));
    try {
      const reader = client([], `http://127.0.0.1:${(failing.address() as AddressInfo).port}/`);
      const settled = await Promise.allSettled([
        reader.request({ method: 'eth_blockNumber' }),
        reader.request({ method: 'eth_chainId' }),
      ]);
      for (const each of settled) {
        expect(each.status).toBe('rejected');
        if (each.status === 'rejected') expect(isRpcUnavailable(each.reason)).toBe(true);
      }
    } finally {
      failing.closeAllConnections();
      await new Promise((resolve) => failing.close(resolve));
    }
  });

  it('sends the credentials of the URL as Basic authorization', async () => {
    const withCredentials = url.replace('http://', 'http://reader:s%40cret@');
    expect(await client([], withCredentials).getBlockNumber({ cacheTime: 0 })).toBe(42n);
    expect(authorizations.at(-1)).toBe(`Basic ${Buffer.from('reader:s@cret').toString('base64')}`);
  });
});
