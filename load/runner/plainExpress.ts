/**
 * Bench child: plain express 5 answering GET /config with a fixed JSON body (the service's own
 * /config body, handed over in BENCH_CONFIG_BODY), to compare with the service's GET /config.
 */
import type { AddressInfo } from 'node:net';
import express from 'express';
import { serveChild } from './children';

const body: unknown = JSON.parse(process.env.BENCH_CONFIG_BODY ?? '{"ok":true}');
const app = express();
app.disable('x-powered-by');
app.set('etag', false);
app.get('/config', (_req, res) => {
  res.json(body);
});

const server = app.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
await new Promise<void>((resolve) => server.once('listening', () => resolve()));
server.keepAliveTimeout = 620_000;
const { port } = server.address() as AddressInfo;
serveChild({}, { url: `http://127.0.0.1:${port}` }, async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});
