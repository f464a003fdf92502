/**
 * Bench child: what the parts a paid call cannot do without cost on this machine, one at a time,
 * in CPU of this process per operation (user + system, every thread): a keep-alive HTTP exchange
 * as a client (node:http, as our outbound client and RPC transport use it), a Postgres round trip
 * (pg's `select 1`), a JSON-RPC call through our transport (eth_blockNumber) and four made
 * together (one batch), viem's ECDSA
 * recovery (recoverAddress, what checking a client's EIP-3009 signature costs) and viem's
 * signature of a digest (our account's sign, what paying a target costs). It also sends requests
 * to an inbound server the bench measures (the server's own CPU per request).
 *
 * Calls from the bench: measure {targetUrl, rpcUrl, databaseUrl, count} and send {url, count}.
 * Run built (bundled by the bench, dependencies from node_modules) so that viem's imports cost
 * what they cost in production.
 */
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { createPublicClient, recoverAddress, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { rpcTransport } from '../../payments/networks/evm/transport';
import { serveChild } from './children';

export interface FloorFigures {
  /** CPU microseconds per operation of this process. */
  httpClientUs: number;
  postgresUs: number;
  rpcUs: number;
  /** Four JSON-RPC calls made together: one batch, as a verification's reads go. */
  rpcBatchOfFourUs: number;
  recoverUs: number;
  signUs: number;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

function get(url: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const request = http.get(url, { agent }, (response) => {
      response.on('data', () => {});
      response.on('end', () => resolve());
      response.on('error', reject);
    });
    request.on('error', reject);
  });
}

/** CPU microseconds per call of `operation`, run `count` times one after another after a warm-up. */
async function perOperation(count: number, operation: (index: number) => Promise<unknown>): Promise<number> {
  for (let index = 0; index < Math.ceil(count / 4); index += 1) await operation(index);
  const before = process.cpuUsage();
  for (let index = 0; index < count; index += 1) await operation(index);
  const used = process.cpuUsage(before);
  return (used.user + used.system) / count;
}

async function measure(message: {
  targetUrl: string;
  rpcUrl: string;
  databaseUrl: string;
  count: number;
}): Promise<FloorFigures> {
  const { count } = message;
  const httpClientUs = await perOperation(count, () => get(message.targetUrl));

  const client = new pg.Client({ connectionString: message.databaseUrl });
  await client.connect();
  let postgresUs: number;
  try {
    postgresUs = await perOperation(count, () => client.query('select 1'));
  } finally {
    await client.end();
  }

  const rpc = createPublicClient({
    transport: rpcTransport(message.rpcUrl, { timeout: 10_000, network: 'base-sepolia' }),
  });
  const rpcUs = await perOperation(count, () => rpc.request({ method: 'eth_blockNumber' }));
  const rpcBatchOfFourUs = await perOperation(count, () =>
    Promise.all([
      rpc.request({ method: 'eth_blockNumber' }),
      rpc.request({ method: 'eth_chainId' }),
      rpc.request({ method: 'eth_gasPrice' }),
      rpc.request({ method: 'eth_blockNumber' }),
    ]),
  );

  const account = privateKeyToAccount(generatePrivateKey());
  const hashes = Array.from({ length: count }, (): Hex => `0x${randomBytes(32).toString('hex')}`);
  const at = <T>(list: readonly T[], index: number): T => {
    const item = list[index % list.length];
    if (item === undefined) throw new Error('nothing to measure');
    return item;
  };
  const signatures: Hex[] = [];
  const signUs = await perOperation(count, async (index) => {
    signatures[index % count] = await account.sign({ hash: at(hashes, index) });
  });
  const recoverUs = await perOperation(count, async (index) => {
    const recovered = await recoverAddress({ hash: at(hashes, index), signature: at(signatures, index) });
    if (recovered !== account.address) throw new Error('recovered another address');
  });
  return { httpClientUs, postgresUs, rpcUs, rpcBatchOfFourUs, recoverUs, signUs };
}

async function send(message: { url: string; count: number }): Promise<{ sent: number }> {
  for (let index = 0; index < message.count; index += 1) await get(message.url);
  return { sent: message.count };
}

serveChild({ measure, send });
