/**
 * Bench child: the bare forwarder of ./forwarder.ts inside the stack the service is built on, and
 * nothing else: express 5 with the same JSON body parser, and openapi-backend routing and
 * validating POST /proxy against our document with the service's options. The API key is taken
 * as given (no lookup), and there is no logging, metrics, caps, guard or idempotency. What it
 * costs over the bare forwarder is what express and openapi-backend cost; what the service costs
 * over it is ours.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type Request, type Response } from 'express';
import type { Context } from 'openapi-backend';
import { createBackend, loadDocument } from '../../server/openapi';
import { serveChild } from './children';

const agent = new http.Agent({ keepAlive: true, maxSockets: 1024 });

function fail(res: Response, status: number, message: string): void {
  res.status(status).json({ error: message });
}

const api = await createBackend(loadDocument());
api.registerSecurityHandler('ApiKeyAuth', (c: Context) => {
  const headers = c.request.headers as Record<string, string | string[] | undefined>;
  return Boolean(headers['x-api-key']);
});
api.register({
  unauthorizedHandler: (_c: Context, _req: Request, res: Response) => fail(res, 401, 'no key'),
  validationFail: (_c: Context, _req: Request, res: Response) => fail(res, 400, 'invalid request'),
  notFound: (_c: Context, _req: Request, res: Response) => fail(res, 404, 'not found'),
  methodNotAllowed: (_c: Context, _req: Request, res: Response) => fail(res, 405, 'method not allowed'),
  postProxy: (c: Context, _req: Request, res: Response) =>
    new Promise<void>((resolve) => {
      const call = c.request.requestBody as { api_url: string; method?: string };
      const outbound = http.request(call.api_url, { method: call.method ?? 'GET', agent }, (answer) => {
        const body: Buffer[] = [];
        answer.on('data', (chunk: Buffer) => body.push(chunk));
        answer.on('end', () => {
          res.status(answer.statusCode ?? 502);
          res.setHeader('content-type', answer.headers['content-type'] ?? 'application/octet-stream');
          res.send(Buffer.concat(body));
          resolve();
        });
        answer.on('error', () => {
          fail(res, 502, 'target failed');
          resolve();
        });
      });
      outbound.on('error', () => {
        fail(res, 502, 'target unreachable');
        resolve();
      });
      outbound.end();
    }),
});

const app = express();
app.disable('x-powered-by');
app.set('etag', false);
app.set('query parser', 'simple');
app.use(express.json({ limit: 1024 * 1024, type: () => true, strict: false }));
app.use((req, res, next) => {
  api
    .handleRequest(
      {
        method: req.method,
        path: req.path,
        body: req.body as unknown,
        query: req.query as Record<string, string>,
        headers: req.headers as Record<string, string>,
      },
      req,
      res,
    )
    .catch(next);
});

const server = app.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
await new Promise<void>((resolve) => server.once('listening', () => resolve()));
server.keepAliveTimeout = 620_000;
server.headersTimeout = 610_000;
const { port } = server.address() as AddressInfo;
serveChild({}, { url: `http://127.0.0.1:${port}` }, async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});
