// A Solana JSON-RPC endpoint on 127.0.0.1 in front of one litesvm ledger, so that code under test
// talks to it exactly as to a node (an unmodified createSolanaRpc from @solana/kit works). It
// answers the methods payment flows use, in the shapes a node gives; anything else is "Method not
// found" rather than a guess. No websocket: confirm by polling getSignatureStatuses.
//
// Where it differs from a node: the ledger (ledger.ts) makes a slot and a blockhash every
// SLOT_DURATION_MS like a live cluster, but every slot has its block (the block height is the
// slot) and an executed transaction is final at once; a transaction's blockhash must be one of the
// ledger's recent ones (no durable nonces); a transaction refused before execution (bad signature,
// expired or unknown blockhash, duplicate) is an error of sendTransaction even with skipPreflight,
// where a node would drop it silently.
//
// The method handlers are in rpc-methods.ts (the table, by kind), rpc-accounts.ts and
// rpc-transactions.ts.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, RpcError } from './rpc-error.js';
import { rpcMethods } from './rpc-methods.js';
import type { SolanaLedger } from './ledger.js';

const MAX_REQUEST_BYTES = 1024 * 1024;

export interface SolanaRpcServer {
  url: string;
  /** How many JSON-RPC calls were answered, by method. */
  callCounts: Map<string, number>;
  close(): Promise<void>;
}

export async function startSolanaRpcServer(ledger: SolanaLedger): Promise<SolanaRpcServer> {
  const methods = rpcMethods(ledger);
  const callCounts = new Map<string, number>();

  async function answer(call: unknown): Promise<unknown> {
    const request =
      typeof call === 'object' && call !== null
        ? (call as { jsonrpc?: unknown; id?: unknown; method?: unknown; params?: unknown })
        : undefined;
    const id = request?.id ?? null;
    try {
      if (request === undefined || typeof request.method !== 'string') {
        throw new RpcError(INVALID_REQUEST, 'Invalid request');
      }
      const method = methods[request.method];
      if (!method) throw new RpcError(METHOD_NOT_FOUND, 'Method not found');
      callCounts.set(request.method, (callCounts.get(request.method) ?? 0) + 1);
      const params = Array.isArray(request.params) ? request.params : [];
      return { jsonrpc: '2.0', result: await method(params), id };
    } catch (error) {
      const rpcError =
        error instanceof RpcError ? error : new RpcError(INVALID_PARAMS, `Invalid params: ${(error as Error).message}`);
      return { jsonrpc: '2.0', error: { code: rpcError.code, message: rpcError.message, data: rpcError.data }, id };
    }
  }

  async function serve(request: IncomingMessage, response: ServerResponse): Promise<void> {
    let body: unknown;
    try {
      body = JSON.parse(await readBody(request));
    } catch {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(stringify({ jsonrpc: '2.0', error: { code: PARSE_ERROR, message: 'Parse error' }, id: null }));
      return;
    }
    const result = Array.isArray(body) ? await Promise.all(body.map(answer)) : await answer(body);
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(stringify(result));
  }

  const server: Server = createServer((request, response) => {
    serve(request, response).catch((error: unknown) => {
      console.error('local Solana JSON-RPC:', error);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    callCounts,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

async function readBody(request: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request) {
    size += (chunk as Buffer).length;
    if (size > MAX_REQUEST_BYTES) throw new Error('request too large');
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** JSON with u64 values as bare numbers, as a node writes them (kit reads every number as a bigint). */
function stringify(value: unknown): string {
  return JSON.stringify(value, (_key: string, item: unknown) =>
    typeof item === 'bigint' ? `__u64__${item}` : item,
  ).replace(/"__u64__(\d+)"/g, '$1');
}
