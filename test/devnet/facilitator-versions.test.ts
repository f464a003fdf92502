// The version a facilitator settles each network in, read from its GET /supported (kept, not
// asked again on every payment), and the Solana fee payer of our 402 in that version.
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { facilitatorFeePayer, facilitatorSupport, facilitatorVersionFor } from '../../payments/incoming/facilitator';

describe('a facilitator of either version', () => {
  let server: Server;
  let url: string;
  let supportedReads = 0;
  const kinds = [
    { x402Version: 1, scheme: 'exact', network: 'base' },
    { x402Version: 2, scheme: 'exact', network: 'eip155:8453' },
    { x402Version: 1, scheme: 'exact', network: 'solana', extra: { feePayer: 'V1FeePayer' } },
    { x402Version: 1, scheme: 'exact', network: 'base-sepolia' },
    { x402Version: 2, scheme: 'exact', network: 'solana:*', extra: { feePayer: 'V2FeePayer' } },
  ];

  beforeAll(async () => {
    server = createServer((request, response) => {
      if (request.url === '/supported') supportedReads++;
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ kinds, extensions: [], signers: {} }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  });
  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
  });

  it('settles in version 2 the networks /supported lists in version 2 (CAIP-2 or a pattern), the others in version 1', async () => {
    const support = await facilitatorSupport(url, { timeoutMs: 2_000 });
    expect(facilitatorVersionFor(support, 'base')).toBe(2);
    expect(facilitatorVersionFor(support, 'base-sepolia')).toBe(1);
    expect(facilitatorVersionFor(support, 'solana')).toBe(2);
    expect(facilitatorVersionFor(undefined, 'base')).toBe(1);
    // The Solana fee payer of our 402 is the one of the version we settle in.
    expect(await facilitatorFeePayer(url, 'solana', { timeoutMs: 2_000 })).toBe('V2FeePayer');
  });

  it('reads /supported once and keeps it', async () => {
    const before = supportedReads;
    await Promise.all([1, 2, 3].map(() => facilitatorSupport(`${url}/`, { timeoutMs: 2_000 })));
    await facilitatorSupport(url, { timeoutMs: 2_000 });
    expect(supportedReads - before).toBeLessThanOrEqual(1);
  });
});
