/**
 * A JSON-RPC endpoint on 127.0.0.1 that answers the reads of the readiness probe for an EVM chain
 * (eth_blockNumber, eth_chainId) and a Solana cluster (getSlot, getGenesisHash) at once: Base Sepolia's
 * chain id and Solana Devnet's genesis hash unless told others; in mode `hang` it keeps every request
 * open until it is stopped.
 */
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A JSON-RPC endpoint of an EVM chain and a Solana cluster at once; `mode` makes it hang. */
export interface RpcStandIn {
  url: string;
  mode: 'answer' | 'hang';
  /** The chain id eth_chainId answers (Base Sepolia's unless changed). */
  chainId: number;
  /** The hash getGenesisHash answers (Solana Devnet's unless changed). */
  genesisHash: string;
  methods: string[];
  stop(): Promise<void>;
}

export async function startRpcStandIn(): Promise<RpcStandIn> {
  const hung: Array<() => void> = [];
  const standIn: RpcStandIn = {
    url: '',
    mode: 'answer',
    chainId: 84532,
    genesisHash: 'EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG',
    methods: [],
    stop: async () => {},
  };
  const server: HttpServer = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      type Request = { id: number; method: string };
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Request | Request[];
      const requests = Array.isArray(body) ? body : [body];
      standIn.methods.push(...requests.map((request) => request.method));
      const results: Record<string, unknown> = {
        getSlot: 1234,
        getGenesisHash: standIn.genesisHash,
        eth_chainId: `0x${standIn.chainId.toString(16)}`,
      };
      const answerOf = (request: Request) => ({
        jsonrpc: '2.0',
        id: request.id,
        result: results[request.method] ?? '0x10',
      });
      // A batch (the service's EVM transport sends concurrent requests as one) is answered as one.
      const answer = () => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(Array.isArray(body) ? body.map(answerOf) : answerOf(body)));
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
