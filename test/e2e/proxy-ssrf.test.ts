// The SSRF guard through POST /proxy and /proxy/sim: every refused URL is a 400 {error, details}
// and no connection reaches the loopback listener that stands for an internal service (it is not
// in SSRF_ALLOW_HOSTS). Names resolve through a table only: no test reaches a real DNS server,
// and no packet leaves 127.0.0.0/8 or ::1.
import http from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestAccount } from '../support/accounts';
import { tableResolver } from '../support/resolver';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

interface Listener {
  connections: number;
  close(): Promise<void>;
}

/** Counts connections and answers each with a 204, on one port at both loopback addresses. */
async function startListener(): Promise<Listener & { port: number }> {
  const state = { connections: 0 };
  const servers: net.Server[] = [];
  const sockets = new Set<net.Socket>();
  const listen = (host: string, port: number) =>
    new Promise<net.Server>((resolve, reject) => {
      const server = net.createServer((socket) => {
        state.connections += 1;
        sockets.add(socket);
        socket.on('close', () => sockets.delete(socket));
        // Reading lets the socket see the client's end and close.
        socket.resume();
        socket.end('HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n');
      });
      server.once('error', reject);
      server.listen(port, host, () => resolve(server));
    });
  const first = await listen('127.0.0.1', 0);
  servers.push(first);
  const port = (first.address() as net.AddressInfo).port;
  servers.push(await listen('::1', port));
  return {
    port,
    get connections() {
      return state.connections;
    },
    set connections(value: number) {
      state.connections = value;
    },
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
    },
  };
}

let guarded: Listener & { port: number };
let redirector: http.Server;
let redirectorHost: string;
let t: TestService;
let key: string;

beforeAll(async () => {
  guarded = await startListener();
  redirector = http.createServer((request, response) => {
    const to: Record<string, string> = {
      '/loopback': `http://127.0.0.1:${guarded.port}/`,
      '/decimal': `http://2130706433:${guarded.port}/`,
      '/ipv6': `http://[::1]:${guarded.port}/`,
      '/name': `http://sneaky.example:${guarded.port}/`,
      '/file': 'file:///etc/passwd',
      '/gopher': `gopher://127.0.0.1:${guarded.port}/_x`,
    };
    response.writeHead(302, { Location: to[request.url ?? ''] ?? '/' }).end();
  });
  await new Promise<void>((resolve) => redirector.listen(0, '127.0.0.1', resolve));
  redirectorHost = `127.0.0.1:${(redirector.address() as net.AddressInfo).port}`;
  t = await startTestService(
    { SSRF_ALLOW_HOSTS: redirectorHost, NETWORKS: 'base-sepolia' },
    { resolver: tableResolver({ 'internal.example': ['127.0.0.1'], 'sneaky.example': ['127.0.0.1'] }) },
  );
  key = (await createTestAccount(t.database.handle.db, { credits: 1_000n })).key;
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  const redirecting = ifStarted(redirector);
  if (redirecting) {
    redirecting.closeAllConnections();
    await new Promise((resolve) => redirecting.close(resolve));
  }
  await ifStarted(guarded)?.close();
});

const refusedUrls = () => [
  ['decimal', `http://2130706433:${guarded.port}/`],
  ['octal', `http://0177.0.0.1:${guarded.port}/`],
  ['hex', `http://0x7f000001:${guarded.port}/`],
  ['dotted hex', `http://0x7f.0.0.1:${guarded.port}/`],
  ['short', `http://127.1:${guarded.port}/`],
  ['IPv6 loopback', `http://[::1]:${guarded.port}/`],
  ['IPv4-mapped IPv6', `http://[::ffff:127.0.0.1]:${guarded.port}/`],
  ['unspecified', `http://0.0.0.0:${guarded.port}/`],
  ['IPv6 unspecified', `http://[::]:${guarded.port}/`],
  ['a name resolving to 127.0.0.1', `http://internal.example:${guarded.port}/`],
  ['a redirect to a loopback port not allowed', `http://${redirectorHost}/loopback`],
  ['a redirect to its decimal form', `http://${redirectorHost}/decimal`],
  ['a redirect to [::1]', `http://${redirectorHost}/ipv6`],
  ['a redirect to a name resolving to loopback', `http://${redirectorHost}/name`],
  ['a redirect to file:', `http://${redirectorHost}/file`],
  ['a redirect to gopher:', `http://${redirectorHost}/gopher`],
  ['file:', 'file:///etc/passwd'],
  ['gopher:', `gopher://127.0.0.1:${guarded.port}/_x`],
];

describe.each(['/proxy', '/proxy/sim'])('SSRF through %s', (path) => {
  it('refuses every form with 400 {error, details}, and nothing reaches the guarded listener', async () => {
    guarded.connections = 0;
    for (const [form, url] of refusedUrls()) {
      const res = await t.client.post(
        path,
        { api_url: url, method: 'POST', json: { secret: 1 } },
        { headers: { 'x-api-key': key } },
      );
      expect(res.status, `${form}: ${url}`).toBe(400);
      expect(res.body, form).toEqual({
        code: 'validation_failed',
        error: 'Bad Request',
        details: expect.stringMatching(/address|scheme/),
      });
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(guarded.connections).toBe(0);
  });
});

describe('the probe', () => {
  it('does see a connection when its port is allow-listed, so a 0 above means nothing was sent', async () => {
    const open = await startTestService(
      { SSRF_ALLOW_HOSTS: `127.0.0.1:${guarded.port}`, NETWORKS: 'base-sepolia' },
      { resolver: tableResolver() },
    );
    try {
      const { key: openKey } = await createTestAccount(open.database.handle.db);
      guarded.connections = 0;
      const res = await open.client.post(
        '/proxy/sim',
        { api_url: `http://127.0.0.1:${guarded.port}/`, method: 'GET' },
        { headers: { 'x-api-key': openKey } },
      );
      expect(res.body).toEqual({ requiresPayment: false, status: 204, response: '' });
      expect(guarded.connections).toBe(1);
      // The allow list names that exact host and port: another loopback address on that port is refused.
      const other = await open.client.post(
        '/proxy/sim',
        { api_url: `http://127.0.0.2:${guarded.port}/`, method: 'GET' },
        { headers: { 'x-api-key': openKey } },
      );
      expect(other.status).toBe(400);
      expect(guarded.connections).toBe(1);
    } finally {
      await open.stop();
    }
  });
});
