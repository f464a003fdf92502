/**
 * Bench child: the bare Node forwarder that /proxy pass-through is compared with. It takes the
 * same request as POST /proxy ({"api_url", "method"} as JSON), calls the target with node:http
 * and hands back its status, content type and body; no authentication, validation or guard.
 * BENCH_FORWARDER_AGENT=keepalive (default) reuses connections to the target, as a bare forwarder
 * would; =none opens one connection per call (agent: false), as the service's outbound client does.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { serveChild } from './children';

const keepAlive = (process.env.BENCH_FORWARDER_AGENT ?? 'keepalive') === 'keepalive';
const agent = keepAlive ? new http.Agent({ keepAlive: true, maxSockets: 1024 }) : false;

function fail(res: http.ServerResponse, status: number, message: string): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ error: message }));
}

const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    let call: { api_url?: string; method?: string };
    try {
      call = JSON.parse(Buffer.concat(chunks).toString('utf8')) as typeof call;
    } catch {
      fail(res, 400, 'invalid JSON');
      return;
    }
    if (typeof call.api_url !== 'string') {
      fail(res, 400, 'api_url is required');
      return;
    }
    const outbound = http.request(call.api_url, { method: call.method ?? 'GET', agent }, (answer) => {
      const body: Buffer[] = [];
      answer.on('data', (chunk: Buffer) => body.push(chunk));
      answer.on('end', () => {
        res.writeHead(answer.statusCode ?? 502, {
          'content-type': answer.headers['content-type'] ?? 'application/octet-stream',
        });
        res.end(Buffer.concat(body));
      });
      answer.on('error', () => fail(res, 502, 'target failed'));
    });
    outbound.on('error', () => fail(res, 502, 'target unreachable'));
    outbound.end();
  });
});
server.keepAliveTimeout = 620_000;
server.headersTimeout = 610_000;

await new Promise<void>((resolve) => server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', resolve));
const { port } = server.address() as AddressInfo;
serveChild({}, { url: `http://127.0.0.1:${port}`, keepAlive }, async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});
