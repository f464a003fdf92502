/**
 * A JSON-RPC endpoint on 127.0.0.1 that answers the reads of the readiness probe for an EVM chain
 * (eth_blockNumber, eth_chainId) and a Solana cluster (getSlot) at once; in mode `hang` it keeps
 * every request open until it is stopped.
 */
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A JSON-RPC endpoint of an EVM chain and a Solana cluster at once; `mode` makes it hang. */
export interface RpcStandIn {
  url: string;
  mode: 'answer' | 'hang';
  methods: string[];
  stop(): Promise<void>;
}

export async function startRpcStandIn(): Promise<RpcStandIn> {
  const hung: Array<() => void> = [];
  const standIn: RpcStandIn = { url: '', mode: 'answer', methods: [], stop: async () => {} };
  const server: HttpServer = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { id: number; method: string };
      standIn.methods.push(body.method);
      const answer = () => {
        const result = body.method === 'getSlot' ? 1234 : body.method === 'eth_chainId' ? '0x14a34' : '0x10';
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: body.id, result }));
      };
      if (standIn.mode === 'hang') hung.push(answer);
      else answer();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  standIn.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  standIn.stop = async () => {
    for (const answer of hung.splice(0)) answer();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return standIn;
}
