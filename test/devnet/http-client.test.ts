/**
 * The outbound client against real local peers. Hard rule: no test connects to anything but
 * 127.0.0.0/8 or ::1, even when the guard under test is broken. Every call goes through
 * `loopbackOnly` (or, for non-loopback decisions, `recorder`, which never connects where the
 * request was meant to go), and every resolver is a table.
 */
import http from 'node:http';
import type https from 'node:https';
import net, { isIP, type LookupFunction } from 'node:net';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  buildTargetRequest,
  nodeTransport,
  NO_ALLOW_HOSTS,
  parseAllowHosts,
  safeResponseHeaders,
  sendTargetRequest,
  TargetConnections,
  type AllowHosts,
  type CallRequest,
  type OutboundErrorCode,
  type Resolver,
  type SendOptions,
  type TargetAnswer,
  type TargetRequest,
  type TargetResponse,
  type Transport,
} from '../../payments/basics/http';
import type { Failure } from '../../payments/basics/result';
import { callBudget } from '../../payments/outgoing/call';

const isLoopback = (address: string) => /^127\.\d+\.\d+\.\d+$/.test(address) || address === '::1';

/** The real transport, refusing before any packet leaves when a destination is not loopback. */
const loopbackOnly: Transport = (protocol, options) => {
  const hostname = String(options.hostname);
  if (isIP(hostname) !== 0 && !isLoopback(hostname)) throw new Error(`test harness refused to connect to ${hostname}`);
  const vetted = options.lookup;
  if (isIP(hostname) === 0 && !vetted) throw new Error(`test harness refused a system DNS lookup of ${hostname}`);
  const lookup: LookupFunction = (host, lookupOptions, callback) =>
    vetted!(host, lookupOptions, (error, address, family) => {
      const addresses = Array.isArray(address) ? address.map((entry) => entry.address) : [address];
      if (!error && !addresses.every(isLoopback)) {
        callback(new Error(`test harness refused to connect to ${addresses.join(', ')}`), '');
        return;
      }
      callback(error, address, family);
    });
  return nodeTransport(protocol, { ...options, lookup });
};

/** The options less the vetted lookup and the TLS server name, to send the request to a local peer instead. */
function withoutNameChecks(options: https.RequestOptions): https.RequestOptions {
  const rest = { ...options };
  delete rest.lookup;
  delete rest.servername;
  return rest;
}

function tableResolver(table: Record<string, string[]>): Resolver & { calls: string[] } {
  const calls: string[] = [];
  const resolver: Resolver = (hostname) => {
    calls.push(hostname);
    const addresses = table[hostname];
    if (!addresses) {
      return Promise.reject(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' }));
    }
    return Promise.resolve(
      addresses.map((address) => ({ address, family: isIP(address) === 6 ? (6 as const) : (4 as const) })),
    );
  };
  return Object.assign(resolver, { calls });
}

function allow(...hosts: string[]): AllowHosts {
  const parsed = parseAllowHosts(hosts);
  if (!parsed.ok) throw new Error(parsed.details);
  return parsed.value;
}

interface Received {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

interface Peer {
  port: number;
  hostPort: string;
  origin: string;
  received: Received[];
  connections: number;
  close: () => Promise<void>;
}

const peers: Peer[] = [];

/** An HTTP server on a loopback address that records every request, answered by `answer`. */
async function startPeer(
  answer: (request: Received, response: http.ServerResponse) => void = (_request, response) => response.end('ok'),
  host = '127.0.0.1',
): Promise<Peer> {
  const received: Received[] = [];
  const server = http.createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const record = {
        method: request.method ?? '',
        url: request.url ?? '',
        headers: request.headers,
        body: Buffer.concat(chunks),
      };
      received.push(record);
      answer(record, response);
    });
  });
  return listen(server, host, received);
}

/** A TCP listener that counts connections and answers each with `reply` (raw bytes). */
async function startRawPeer(reply: ((socket: net.Socket) => void) | null, host = '127.0.0.1', port = 0): Promise<Peer> {
  const server = net.createServer((socket) => {
    socket.on('error', () => {});
    if (reply) reply(socket);
  });
  return listen(server, host, [], port);
}

async function listen(server: net.Server, host: string, received: Received[], port = 0): Promise<Peer> {
  const sockets = new Set<net.Socket>();
  const peer = { received, connections: 0 } as Peer;
  server.on('connection', (socket) => {
    peer.connections += 1;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  peer.port = (server.address() as net.AddressInfo).port;
  peer.hostPort = `${host.includes(':') ? `[${host}]` : host}:${peer.port}`;
  peer.origin = `http://${peer.hostPort}`;
  peer.close = () =>
    new Promise((resolve) => {
      for (const socket of sockets) socket.destroy();
      server.close(() => resolve());
    });
  peers.push(peer);
  return peer;
}

afterEach(async () => {
  await Promise.all(peers.splice(0).map((peer) => peer.close()));
});

function request(call: CallRequest, paymentHeader?: string, paymentVersion?: 1 | 2): TargetRequest {
  const built = buildTargetRequest(call, { paymentHeader, ...(paymentVersion ? { paymentVersion } : {}) });
  if (!built.ok) throw new Error(`${built.reason}: ${built.details}`);
  return built.value;
}

/** Connections these tests share unless one passes its own, as the service's calls share one set. */
const sharedConnections = new TargetConnections();
afterAll(() => sharedConnections.close());

function attempt(target: TargetRequest, options: Partial<SendOptions> & Pick<SendOptions, 'allowHosts'>) {
  return sendTargetRequest(target, {
    timeoutMs: 5_000,
    resolver: tableResolver({}),
    transport: loopbackOnly,
    connections: sharedConnections,
    ...options,
  });
}

/** A call that must be answered: its response. */
async function send(
  target: TargetRequest,
  options: Partial<SendOptions> & Pick<SendOptions, 'allowHosts'>,
): Promise<TargetResponse> {
  return answered(attempt(target, options));
}

/** Sends a call to this peer (at `path`, its root by default), only the peer's host allowed. */
/** A GET of a peer's root, with only that peer's host allowed. */
function getFrom(peer: { origin: string; hostPort: string }, options: Partial<SendOptions> = {}) {
  return attempt(request({ api_url: peer.origin, method: 'GET' }), { allowHosts: allow(peer.hostPort), ...options });
}

function sendToPeer(peer: { origin: string; hostPort: string }, call: Omit<CallRequest, 'api_url'>, path = '') {
  return send(request({ api_url: `${peer.origin}${path}`, ...call }), { allowHosts: allow(peer.hostPort) });
}

async function answered(promise: Promise<TargetAnswer>): Promise<TargetResponse> {
  const answer = await promise;
  if (!answer.ok) throw new Error(`expected an answer, got ${answer.reason}: ${answer.details}`);
  return answer.value;
}

async function failure(promise: Promise<TargetAnswer>): Promise<Failure<OutboundErrorCode>> {
  const answer = await promise;
  if (answer.ok) throw new Error('expected the call to fail');
  return answer;
}

async function expectCode(
  promise: Promise<TargetAnswer>,
  code: OutboundErrorCode,
): Promise<Failure<OutboundErrorCode>> {
  const error = await failure(promise);
  expect(error.reason, error.details).toBe(code);
  return error;
}

/** Lets a connection attempt that was wrongly started reach the listener before we count. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 50));

describe('each body form arrives at the target as specified', () => {
  it('json', async () => {
    const peer = await startPeer();
    await sendToPeer(peer, { method: 'POST', json: { amount: '0.10', note: 'café' } }, '/pay');
    const received = peer.received[0]!;
    expect(received.method).toBe('POST');
    expect(received.headers['content-type']).toBe('application/json');
    expect(received.body.toString('utf8')).toBe('{"amount":"0.10","note":"café"}');
    expect(received.headers['content-length']).toBe(String(Buffer.byteLength('{"amount":"0.10","note":"café"}')));
  });

  it('payload, the deprecated alias of json', async () => {
    const peer = await startPeer();
    await sendToPeer(peer, { method: 'PUT', payload: { a: 1 } });
    expect(peer.received[0]).toMatchObject({ method: 'PUT', headers: { 'content-type': 'application/json' } });
    expect(peer.received[0]!.body.toString()).toBe('{"a":1}');
  });

  it('data object as a form', async () => {
    const peer = await startPeer();
    await sendToPeer(peer, { method: 'POST', data: { a: 'x y', b: ['1', '2'] } });
    expect(peer.received[0]!.headers['content-type']).toBe('application/x-www-form-urlencoded');
    expect(peer.received[0]!.body.toString()).toBe('a=x+y&b=1&b=2');
  });

  it('data string raw, with the caller content type only', async () => {
    const peer = await startPeer();
    await sendToPeer(peer, { method: 'POST', data: 'raw\u00e9 bytes' });
    await sendToPeer(peer, { method: 'POST', data: '<a/>', headers: { 'Content-Type': 'application/xml' } });
    expect(peer.received[0]!.headers['content-type']).toBeUndefined();
    expect(peer.received[0]!.body).toEqual(Buffer.from('raw\u00e9 bytes', 'utf8'));
    expect(peer.received[1]!.headers['content-type']).toBe('application/xml');
    expect(peer.received[1]!.body.toString()).toBe('<a/>');
  });

  it('body string as-is and body object as JSON text, neither with a content type of ours', async () => {
    const peer = await startPeer();
    await sendToPeer(peer, { method: 'PATCH', body: '{"pre":"serialised"}' });
    await sendToPeer(peer, { method: 'POST', body: { k: ['v'] } });
    expect(peer.received.map((received) => received.body.toString())).toEqual(['{"pre":"serialised"}', '{"k":["v"]}']);
    expect(peer.received.map((received) => received.headers['content-type'])).toEqual([undefined, undefined]);
  });

  it('params appended to the existing query', async () => {
    const peer = await startPeer();
    await sendToPeer(peer, { method: 'GET', params: { page: 2, tag: ['p', 'q r'] } }, '/search?q=a%20b&x=1');
    expect(peer.received[0]).toMatchObject({ method: 'GET', url: '/search?q=a%20b&x=1&page=2&tag=p&tag=q+r' });
    expect(peer.received[0]!.headers['content-length']).toBeUndefined();
    expect(peer.received[0]!.body.length).toBe(0);
  });

  it('basic auth, merged cookies, forwarded headers, our host, payment and encoding headers', async () => {
    const peer = await startPeer();
    const call: CallRequest = {
      api_url: `${peer.origin}/private`,
      method: 'DELETE',
      auth: { username: 'ana', password: 's3cret:x' },
      cookies: { session: 'abc', theme: 'dark' },
      headers: {
        Cookie: 'lang=en; theme=light',
        'X-Trace': 't-1',
        Host: 'evil.example',
        'X-Payment': 'forged',
        'Payment-Signature': 'forged',
        'Accept-Encoding': 'gzip',
      },
    };
    await send(request(call, 'our-signed-payment'), { allowHosts: allow(peer.hostPort) });
    const { headers } = peer.received[0]!;
    expect(headers.authorization).toBe(`Basic ${Buffer.from('ana:s3cret:x').toString('base64')}`);
    expect(headers.cookie).toBe('lang=en; session=abc; theme=dark');
    expect(headers['x-trace']).toBe('t-1');
    expect(headers.host).toBe(peer.hostPort);
    expect(headers['x-payment']).toBe('our-signed-payment');
    expect(headers['payment-signature']).toBeUndefined();
    expect(headers['accept-encoding']).toBe('identity');
  });

  it('returns status, lower-cased headers without hop-by-hop ones, the body and the final URL', async () => {
    const peer = await startPeer((_request, response) => {
      response.writeHead(201, {
        'X-Custom': 'v',
        Connection: 'close, X-Conn-Only',
        'X-Conn-Only': '1',
        'Keep-Alive': 'timeout=1',
        'Set-Cookie': ['a=1', 'b=2'],
      });
      response.end('created');
    });
    const response = await sendToPeer(peer, { method: 'GET' }, '/r');
    expect(response.status).toBe(201);
    expect(response.body.toString()).toBe('created');
    expect(response.url).toBe(`${peer.origin}/r`);
    expect(response.headers['x-custom']).toBe('v');
    expect(response.headers['set-cookie']).toEqual(['a=1', 'b=2']);
    for (const name of ['connection', 'x-conn-only', 'keep-alive', 'transfer-encoding'])
      expect(response.headers).not.toHaveProperty(name);
  });

  it('works through the default transport for a literal loopback target', async () => {
    const peer = await startPeer();
    const response = await answered(
      sendTargetRequest(request({ api_url: peer.origin, method: 'GET' }), {
        timeoutMs: 5_000,
        allowHosts: allow(peer.hostPort),
        connections: sharedConnections,
      }),
    );
    expect(response.body.toString()).toBe('ok');
  });
});

describe('the SSRF corpus is refused with nothing sent', () => {
  let guarded: Peer;
  let guardedV6: Peer;

  // One port, listened on at both loopback addresses; closed after each test like every peer.
  beforeEach(async () => {
    guarded = await startRawPeer(answer204);
    guardedV6 = await startRawPeer(answer204, '::1', guarded.port);
  });

  function answer204(socket: net.Socket) {
    socket.end('HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n');
  }

  const corpus = (port: number) => [
    `http://2130706433:${port}/`,
    `http://0177.0.0.1:${port}/`,
    `http://0x7f000001:${port}/`,
    `http://0x7f.0.0.1:${port}/`,
    `http://127.1:${port}/`,
    `http://[::1]:${port}/`,
    `http://[::ffff:127.0.0.1]:${port}/`,
    `http://[::ffff:7f00:1]:${port}/`,
    `http://0.0.0.0:${port}/`,
    `http://[::]:${port}/`,
  ];

  it('the listeners do see a connection when their pair is allow-listed (the probe works)', async () => {
    const allowHosts = allow(`127.0.0.1:${guarded.port}`, `[::1]:${guarded.port}`);
    expect(
      (await send(request({ api_url: `http://127.1:${guarded.port}/`, method: 'GET' }), { allowHosts })).status,
    ).toBe(204);
    expect(
      (await send(request({ api_url: `http://[::1]:${guarded.port}/`, method: 'GET' }), { allowHosts })).status,
    ).toBe(204);
    expect(guarded.connections).toBe(1);
    expect(guardedV6.connections).toBe(1);
  });

  it('every literal loopback form of an un-allowed port', async () => {
    const allowHosts = allow('127.0.0.1:1', '[::1]:1');
    for (const url of corpus(guarded.port)) {
      const error = await expectCode(
        attempt(request({ api_url: url, method: 'POST', json: { x: 1 } }), { allowHosts }),
        'ssrf_blocked',
      );
      expect(error.details).toMatch(/loopback|unspecified/);
    }
    await settle();
    expect(guarded.connections).toBe(0);
    expect(guardedV6.connections).toBe(0);
  });

  it('a host name that resolves to 127.0.0.1', async () => {
    const resolver = tableResolver({ 'internal.example': ['127.0.0.1'] });
    await expectCode(
      attempt(request({ api_url: `http://internal.example:${guarded.port}/`, method: 'GET' }), {
        allowHosts: NO_ALLOW_HOSTS,
        resolver,
      }),
      'ssrf_blocked',
    );
    await settle();
    expect(resolver.calls).toEqual(['internal.example']);
    expect(guarded.connections).toBe(0);
  });

  it('a redirect from an allowed server to the un-allowed port', async () => {
    const redirectTargets = [
      `http://127.0.0.1:${guarded.port}/`,
      `http://2130706433:${guarded.port}/`,
      `http://[::ffff:7f00:1]:${guarded.port}/`,
      `http://[::1]:${guarded.port}/`,
      `//127.0.0.1:${guarded.port}/scheme-relative`,
    ];
    const redirector = await startPeer((received, response) => {
      response.writeHead(302, { Location: redirectTargets[Number(received.url.slice(1))] }).end();
    });
    for (const index of redirectTargets.keys()) {
      const call = { api_url: `${redirector.origin}/${index}`, method: 'GET' };
      await expectCode(attempt(request(call), { allowHosts: allow(redirector.hostPort) }), 'ssrf_blocked');
    }
    await settle();
    expect(redirector.received).toHaveLength(redirectTargets.length);
    expect(guarded.connections).toBe(0);
    expect(guardedV6.connections).toBe(0);
  });

  it('a redirect to a name that resolves to loopback', async () => {
    const redirector = await startPeer((_received, response) => {
      response.writeHead(307, { Location: `http://sneaky.example:${guarded.port}/` }).end();
    });
    const resolver = tableResolver({ 'sneaky.example': ['127.0.0.1'] });
    await expectCode(getFrom(redirector, { resolver }), 'ssrf_blocked');
    await settle();
    expect(guarded.connections).toBe(0);
  });

  it('file: and gopher: URLs, directly and as redirect targets', async () => {
    const allowHosts = allow(`127.0.0.1:${guarded.port}`);
    await expectCode(
      attempt(request({ api_url: 'file:///etc/passwd', method: 'GET' }), { allowHosts }),
      'unsupported_scheme',
    );
    await expectCode(
      attempt(request({ api_url: `gopher://127.0.0.1:${guarded.port}/`, method: 'GET' }), { allowHosts }),
      'unsupported_scheme',
    );
    const redirector = await startPeer((received, response) => {
      response
        .writeHead(301, {
          Location: received.url === '/file' ? 'file:///etc/passwd' : `gopher://127.0.0.1:${guarded.port}/_x`,
        })
        .end();
    });
    const redirected = { allowHosts: allow(redirector.hostPort, `127.0.0.1:${guarded.port}`) };
    await expectCode(
      attempt(request({ api_url: `${redirector.origin}/file`, method: 'GET' }), redirected),
      'unsupported_scheme',
    );
    await expectCode(
      attempt(request({ api_url: `${redirector.origin}/gopher`, method: 'GET' }), redirected),
      'unsupported_scheme',
    );
    await settle();
    expect(guarded.connections).toBe(0);
  });
});

/**
 * Decisions about addresses outside loopback. The recorder stands in for the connection: it
 * notes where the request would have gone (the vetted lookup's answer, or the literal host)
 * and then sends it to a loopback echo peer instead, whatever the guard decided.
 */
describe('private and public ranges through sendTargetRequest, with the connection recorded', () => {
  function recorder(echo: Peer) {
    const attempts: { hostname: string; addresses: string[] }[] = [];
    const transport: Transport = (_protocol, options) => {
      const attempt = { hostname: String(options.hostname), addresses: [] as string[] };
      attempts.push(attempt);
      if (isIP(attempt.hostname) !== 0) attempt.addresses.push(attempt.hostname);
      else {
        options.lookup!(attempt.hostname, { all: true }, (_error, addresses) => {
          if (Array.isArray(addresses)) attempt.addresses.push(...addresses.map((entry) => entry.address));
        });
      }
      return http.request({
        ...withoutNameChecks(options),
        protocol: 'http:',
        hostname: '127.0.0.1',
        port: echo.port,
        agent: false,
      });
    };
    return { attempts, transport };
  }

  const blocked = [
    '10.0.0.1',
    '10.255.0.9',
    '172.16.0.1',
    '172.31.255.254',
    '192.168.0.1',
    '192.168.255.255',
    '169.254.169.254',
    '169.254.0.1',
    '100.64.0.1',
    '100.127.255.255',
    'fc00::1',
    'fdff:ffff::1',
    'fe80::1',
    'febf::1',
    '::ffff:10.0.0.1',
    '::ffff:172.16.0.1',
    '::ffff:192.168.1.1',
    '::ffff:169.254.169.254',
    '::ffff:100.64.0.1',
    '::ffff:a00:1',
    '64:ff9b::10.0.0.1',
    '64:ff9b::ac10:1',
    '64:ff9b::c0a8:101',
    '64:ff9b::a9fe:a9fe',
    '64:ff9b::6440:1',
  ];
  const publicAddresses = ['8.8.8.8', '1.1.1.1', '2606:4700::1111', '::ffff:8.8.8.8', '64:ff9b::808:808'];

  it.each(blocked)('refuses a name resolving to %s and never connects', async (address) => {
    const echo = await startPeer();
    const { attempts, transport } = recorder(echo);
    const resolver = tableResolver({ 'target.example': ['8.8.4.4', address] });
    await expectCode(
      attempt(request({ api_url: 'https://target.example/pay', method: 'POST', json: {} }), {
        allowHosts: NO_ALLOW_HOSTS,
        resolver,
        transport,
      }),
      'ssrf_blocked',
    );
    expect(attempts).toEqual([]);
    expect(echo.connections).toBe(0);
  });

  it.each(blocked)('refuses the literal %s and never connects', async (address) => {
    const echo = await startPeer();
    const { attempts, transport } = recorder(echo);
    const host = isIP(address) === 6 ? `[${address}]` : address;
    await expectCode(
      attempt(request({ api_url: `http://${host}:8080/`, method: 'GET' }), { allowHosts: NO_ALLOW_HOSTS, transport }),
      'ssrf_blocked',
    );
    expect(attempts).toEqual([]);
  });

  it.each(publicAddresses)('calls a name resolving to %s at exactly the vetted address', async (address) => {
    const echo = await startPeer();
    const { attempts, transport } = recorder(echo);
    const resolver = tableResolver({ 'public.example': [address] });
    const response = await send(request({ api_url: 'https://public.example:8443/x', method: 'GET' }), {
      allowHosts: NO_ALLOW_HOSTS,
      resolver,
      transport,
    });
    expect(response.body.toString()).toBe('ok');
    expect(attempts).toEqual([{ hostname: 'public.example', addresses: [address] }]);
    expect(echo.received[0]!.headers.host).toBe('public.example:8443');
    expect(resolver.calls).toEqual(['public.example']);
  });

  it.each(publicAddresses)('calls the public literal %s', async (address) => {
    const echo = await startPeer();
    const { attempts, transport } = recorder(echo);
    const host = isIP(address) === 6 ? `[${address}]` : address;
    await send(request({ api_url: `http://${host}/`, method: 'GET' }), { allowHosts: NO_ALLOW_HOSTS, transport });
    expect(attempts).toEqual([
      { hostname: new URL(`http://${host}/`).hostname.replace(/^\[|\]$/g, ''), addresses: [expect.any(String)] },
    ]);
    expect(isIP(attempts[0]!.addresses[0]!)).not.toBe(0);
  });

  it('the vetted lookup answers only for the checked host, with only the checked addresses', async () => {
    const echo = await startPeer();
    let lookup: LookupFunction | undefined;
    const transport: Transport = (_protocol, options) => {
      lookup = options.lookup;
      return http.request({
        ...withoutNameChecks(options),
        protocol: 'http:',
        hostname: '127.0.0.1',
        port: echo.port,
        agent: false,
      });
    };
    const resolver = tableResolver({ 'two.example': ['8.8.8.8', '2606:4700::1111'] });
    await send(request({ api_url: 'https://two.example/', method: 'GET' }), {
      allowHosts: NO_ALLOW_HOSTS,
      resolver,
      transport,
    });
    const ask = (host: string, options: Parameters<LookupFunction>[1]) =>
      new Promise<unknown>((resolve) =>
        lookup!(host, options, (error, address, family) => resolve(error ? 'error' : { address, family })),
      );
    expect(await ask('two.example', { all: true })).toEqual({
      address: [
        { address: '8.8.8.8', family: 4 },
        { address: '2606:4700::1111', family: 6 },
      ],
      family: undefined,
    });
    expect(await ask('two.example', {})).toEqual({ address: '8.8.8.8', family: 4 });
    expect(await ask('two.example', { family: 6 })).toEqual({ address: '2606:4700::1111', family: 6 });
    expect(await ask('other.example', { all: true })).toBe('error');
  });
});

describe('connections use the checked address', () => {
  it('a name is resolved once per hop by our resolver and the connection goes to that address', async () => {
    const peer = await startPeer();
    let calls = 0;
    // A rebinding resolver: the first answer is the allowed peer, any later one a forbidden address.
    const resolver: Resolver = () =>
      Promise.resolve(calls++ === 0 ? [{ address: '127.0.0.1', family: 4 }] : [{ address: '10.0.0.1', family: 4 }]);
    const response = await send(request({ api_url: `http://pinned.example:${peer.port}/x`, method: 'GET' }), {
      allowHosts: allow(`pinned.example:${peer.port}`),
      resolver,
    });
    expect(response.status).toBe(200);
    expect(calls).toBe(1);
    expect(peer.received[0]!.headers.host).toBe(`pinned.example:${peer.port}`);
  });

  it('the allow list exempts exactly host:port: the same host on another port stays refused', async () => {
    const peer = await startPeer();
    const other = await startPeer();
    const call = { api_url: `http://127.0.0.1:${peer.port}/`, method: 'GET' };
    await expectCode(attempt(request(call), { allowHosts: allow(`127.0.0.1:${other.port}`) }), 'ssrf_blocked');
    await expectCode(attempt(request(call), { allowHosts: allow(`localhost:${peer.port}`) }), 'ssrf_blocked');
    await expectCode(attempt(request(call), { allowHosts: allow(`127.0.0.2:${peer.port}`) }), 'ssrf_blocked');
    await settle();
    expect(peer.connections).toBe(0);
    const response = await send(request(call), { allowHosts: allow(`127.0.0.1:${peer.port}`) });
    expect(response.body.toString()).toBe('ok');
    expect(peer.connections).toBe(1);
  });
});

describe('reused connections', () => {
  it('sequential calls to one vetted destination share one connection; idle ones close', async () => {
    const peer = await startPeer();
    const connections = new TargetConnections({ idleMs: 200 });
    const call = request({ api_url: `${peer.origin}/a`, method: 'GET' });
    for (let i = 0; i < 3; i++) {
      const response = await send(call, { allowHosts: allow(peer.hostPort), connections });
      expect(response.body.toString()).toBe('ok');
    }
    expect(peer.received).toHaveLength(3);
    expect(peer.connections).toBe(1);
    expect(connections.idleSockets()).toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(connections.idleSockets()).toBe(0);
    connections.close();
  });

  it('a name that now resolves to another address never gets the old connection', async () => {
    // One listener on both loopback families: the same port answers 127.0.0.1 and ::1.
    const peer = await startPeer(undefined, '::');
    let answer = '127.0.0.1';
    const resolver: Resolver = () => Promise.resolve([{ address: answer, family: isIP(answer) === 6 ? 6 : 4 }]);
    const connections = new TargetConnections();
    const call = request({ api_url: `http://moving.example:${peer.port}/`, method: 'GET' });
    const options = { allowHosts: allow(`moving.example:${peer.port}`), resolver, connections };
    await send(call, options);
    await send(call, options);
    expect(peer.connections).toBe(1);
    answer = '::1';
    await send(call, options);
    expect(peer.connections).toBe(2);
    connections.close();
    expect(connections.idleSockets()).toBe(0);
  });

  it('a response not read to its end, or a timeout, closes its connection instead of pooling it', async () => {
    let slow = false;
    const peer = await startPeer((_request, response) => {
      if (slow) return; // never answers
      response.end('ok');
    });
    const connections = new TargetConnections();
    const call = request({ api_url: `${peer.origin}/`, method: 'GET' });
    await send(call, { allowHosts: allow(peer.hostPort), connections });
    slow = true;
    await expectCode(attempt(call, { allowHosts: allow(peer.hostPort), connections, timeoutMs: 200 }), 'timeout');
    expect(connections.idleSockets()).toBe(0);
    slow = false;
    await send(call, { allowHosts: allow(peer.hostPort), connections });
    expect(peer.connections).toBe(2);
    connections.close();
  });

  /** Answers the first request of each connection with keep-alive, and resets the connection on the second. */
  async function startClosingPeer(): Promise<Peer & { requests: number }> {
    const state = { requests: 0 };
    const peer = await startRawPeer((socket) => {
      let seen = 0;
      socket.on('data', (chunk: Buffer) => {
        if (!chunk.includes('\r\n\r\n')) return;
        state.requests += 1;
        seen += 1;
        if (seen === 1) socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok');
        else socket.resetAndDestroy();
      });
    });
    Object.defineProperty(peer, 'requests', { get: () => state.requests });
    return peer as Peer & { requests: number };
  }

  it('a pooled connection the target already closed: GET is sent again on a new connection', async () => {
    const peer = await startClosingPeer();
    const connections = new TargetConnections();
    const call = request({ api_url: `${peer.origin}/`, method: 'GET' });
    await send(call, { allowHosts: allow(peer.hostPort), connections });
    const again = await send(call, { allowHosts: allow(peer.hostPort), connections });
    expect(again.body.toString()).toBe('ok');
    expect(peer.connections).toBe(2);
    expect(peer.requests).toBe(3);
    connections.close();
  });

  it('... but POST is not sent twice: the failure is reported', async () => {
    const peer = await startClosingPeer();
    const connections = new TargetConnections();
    const post = request({ api_url: `${peer.origin}/`, method: 'POST', json: { a: 1 } });
    await send(post, { allowHosts: allow(peer.hostPort), connections });
    const error = await expectCode(
      attempt(post, { allowHosts: allow(peer.hostPort), connections }),
      'malformed_response',
    );
    expect(error.details).toMatch(/closed the connection/);
    expect(peer.requests).toBe(2);
    expect(peer.connections).toBe(1);
    connections.close();
  });

  it('connections: false opens one connection per exchange', async () => {
    const peer = await startPeer();
    const call = request({ api_url: `${peer.origin}/`, method: 'GET' });
    await send(call, { allowHosts: allow(peer.hostPort), connections: false });
    await send(call, { allowHosts: allow(peer.hostPort), connections: false });
    expect(peer.connections).toBe(2);
  });
});

describe('redirects', () => {
  it('303 after POST becomes GET without body or body headers, and reports the final URL', async () => {
    const final = await startPeer();
    const start = await startPeer((_received, response) =>
      response.writeHead(303, { Location: `${final.origin}/done?x=1` }).end(),
    );
    const response = await send(request({ api_url: `${start.origin}/pay`, method: 'POST', json: { a: 1 } }), {
      allowHosts: allow(start.hostPort, final.hostPort),
    });
    expect(response.url).toBe(`${final.origin}/done?x=1`);
    expect(start.received[0]!.method).toBe('POST');
    expect(final.received[0]).toMatchObject({ method: 'GET', url: '/done?x=1' });
    expect(final.received[0]!.body.length).toBe(0);
    expect(final.received[0]!.headers['content-type']).toBeUndefined();
    expect(final.received[0]!.headers['content-length']).toBeUndefined();
  });

  it.each([
    [301, 'POST', 'GET', ''],
    [302, 'POST', 'GET', ''],
    [302, 'PUT', 'PUT', '{"a":1}'],
    [307, 'POST', 'POST', '{"a":1}'],
    [308, 'PATCH', 'PATCH', '{"a":1}'],
  ])('%i after %s is followed with %s', async (status, method, followedMethod, followedBody) => {
    const peer = await startPeer((received, response) => {
      if (received.url === '/start') response.writeHead(status, { Location: '/next' }).end();
      else response.end('done');
    });
    await sendToPeer(peer, { method, json: { a: 1 } }, '/start');
    expect(peer.received[1]).toMatchObject({ method: followedMethod, url: '/next' });
    expect(peer.received[1]!.body.toString()).toBe(followedBody);
  });

  /**
   * One call redirected to its own origin (/same) and one to another origin (/cross): the requests
   * each redirect lands with, as the two peers received them.
   */
  async function landedAfterRedirects(call: Omit<CallRequest, 'api_url'>, paymentVersion?: 1 | 2) {
    const other = await startPeer();
    const start = await startPeer((received, response) => {
      if (received.url === '/same') response.writeHead(302, { Location: '/landed' }).end();
      else if (received.url === '/cross') response.writeHead(302, { Location: `${other.origin}/landed` }).end();
      else response.end('landed');
    });
    const allowHosts = allow(start.hostPort, other.hostPort);
    for (const path of ['/same', '/cross'])
      await send(request({ ...call, api_url: `${start.origin}${path}` }, 'pay', paymentVersion), { allowHosts });
    return {
      sameOrigin: start.received.find((received) => received.url === '/landed')!,
      crossOrigin: other.received[0]!,
    };
  }

  it('keeps credentials on the same origin and strips them when the origin changes', async () => {
    const { sameOrigin, crossOrigin } = await landedAfterRedirects({
      method: 'GET',
      auth: { username: 'u', password: 'p' },
      cookies: { session: 's' },
      headers: { 'X-Trace': 't' },
    });
    expect(sameOrigin.headers).toMatchObject({
      authorization: expect.stringMatching(/^Basic /),
      cookie: 'session=s',
      'x-payment': 'pay',
    });
    expect(crossOrigin.headers['x-trace']).toBe('t');
    expect(crossOrigin.headers.authorization).toBeUndefined();
    expect(crossOrigin.headers.cookie).toBeUndefined();
    expect(crossOrigin.headers['x-payment']).toBeUndefined();
  });

  it('keeps our PAYMENT-SIGNATURE (x402 version 2) on the same origin and strips it when the origin changes', async () => {
    const { sameOrigin, crossOrigin } = await landedAfterRedirects(
      { method: 'GET', headers: { 'X-Payment': 'forged', 'X-Trace': 't' } },
      2,
    );
    expect(sameOrigin.headers['payment-signature']).toBe('pay');
    expect(sameOrigin.headers['x-payment']).toBeUndefined();
    expect(crossOrigin.headers['x-trace']).toBe('t');
    expect(crossOrigin.headers['payment-signature']).toBeUndefined();
    expect(crossOrigin.headers['x-payment']).toBeUndefined();
  });

  it('follows at most maxRedirects hops', async () => {
    const peer = await startPeer((received, response) =>
      response.writeHead(302, { Location: `/hop${received.url.length}` }).end(),
    );
    await expectCode(
      attempt(request({ api_url: `${peer.origin}/`, method: 'GET' }), {
        allowHosts: allow(peer.hostPort),
        maxRedirects: 3,
      }),
      'too_many_redirects',
    );
    expect(peer.received).toHaveLength(4);
  });

  it('returns the redirect itself when maxRedirects is 0', async () => {
    const peer = await startPeer((_received, response) =>
      response.writeHead(302, { Location: '/elsewhere' }).end('moved'),
    );
    const response = await send(request({ api_url: peer.origin, method: 'GET' }), {
      allowHosts: allow(peer.hostPort),
      maxRedirects: 0,
    });
    expect(response).toMatchObject({ status: 302, headers: { location: '/elsewhere' } });
    expect(response.body.toString()).toBe('moved');
    expect(peer.received).toHaveLength(1);
  });
});

describe('bounds and failures', () => {
  it('times out on a target that accepts and never answers, within the bound', async () => {
    const silent = await startRawPeer(() => {});
    const started = performance.now();
    await expectCode(getFrom(silent, { timeoutMs: 300 }), 'timeout');
    const elapsed = performance.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(290);
    // The peer never answers: any end is the bound's (generous: a loaded machine is slow, not wrong).
    expect(elapsed).toBeLessThan(30_000);
    expect(silent.connections).toBe(1);
  });

  it("a call's later request gets what is left of the caller's bound, and its timeout names that bound", async () => {
    const silent = await startRawPeer(() => {});
    const budget = callBudget(400);
    // The first part of the call took at least 150 ms (a timer may fire a little early: wait it out).
    const begun = performance.now();
    while (performance.now() - begun < 150) await new Promise((resolve) => setTimeout(resolve, 10));
    const left = budget.remainingMs();
    expect(left).toBeLessThanOrEqual(251);
    const error = await expectCode(getFrom(silent, { timeoutMs: left, boundMs: budget.boundMs }), 'timeout');
    expect(error.details).toBe('target did not answer within 400 ms');
  });

  it('times out on a body that stalls after the headers', async () => {
    const stalling = await startPeer((_received, response) => {
      response.writeHead(200, { 'Content-Length': '100' });
      response.write('partial');
    });
    const started = performance.now();
    await expectCode(getFrom(stalling, { timeoutMs: 300 }), 'timeout');
    // The body never completes: any end is the bound's (generous: a loaded machine is slow, not wrong).
    expect(performance.now() - started).toBeLessThan(30_000);
  });

  it('counts name resolution inside the timeout', async () => {
    const resolver: Resolver = () => new Promise(() => {});
    await expectCode(
      attempt(request({ api_url: 'http://slow-dns.example/', method: 'GET' }), {
        allowHosts: NO_ALLOW_HOSTS,
        resolver,
        timeoutMs: 200,
      }),
      'timeout',
    );
  });

  it('refuses a streamed response larger than maxResponseBytes', async () => {
    const big = await startPeer((_received, response) => {
      response.writeHead(200, { 'Content-Type': 'application/octet-stream' });
      const chunk = Buffer.alloc(64 * 1024, 1);
      for (let index = 0; index < 32; index += 1) response.write(chunk);
      response.end();
    });
    const error = await expectCode(getFrom(big, { maxResponseBytes: 1024 * 1024 }), 'response_too_large');
    expect(error.details).toContain('1048576');
  });

  it('refuses a declared Content-Length above the bound before reading it, and accepts exactly the bound', async () => {
    const sized = await startPeer((received, response) =>
      response.end(Buffer.alloc(received.url === '/over' ? 1001 : 1000)),
    );
    const options = { allowHosts: allow(sized.hostPort), maxResponseBytes: 1000 };
    await expectCode(
      attempt(request({ api_url: `${sized.origin}/over`, method: 'GET' }), options),
      'response_too_large',
    );
    const response = await send(request({ api_url: `${sized.origin}/exact`, method: 'GET' }), options);
    expect(response.body.length).toBe(1000);
  });

  it('applies the default bound of 10 MiB', async () => {
    const huge = await startPeer((_received, response) => {
      response.writeHead(200, { 'Content-Length': String(10 * 1024 * 1024 + 1) });
      response.end();
    });
    await expectCode(getFrom(huge), 'response_too_large');
  });

  it('reports a refused connection as unreachable', async () => {
    const closed = await startPeer();
    await closed.close();
    await expectCode(getFrom(closed), 'unreachable');
  });

  it('reports a name that does not resolve as unreachable', async () => {
    await expectCode(
      attempt(request({ api_url: 'http://missing.example/', method: 'GET' }), { allowHosts: NO_ALLOW_HOSTS }),
      'unreachable',
    );
  });

  it('reports a response that is not HTTP as malformed', async () => {
    const garbage = await startRawPeer((socket) => socket.end('SSH-2.0-OpenSSH_9.6\r\n\r\n'));
    await expectCode(getFrom(garbage), 'malformed_response');
  });

  it('reports a connection closed before any response as malformed', async () => {
    const hangUp = await startRawPeer((socket) => socket.once('data', () => socket.destroy()));
    await expectCode(getFrom(hangUp), 'malformed_response');
  });

  it('reports a body cut short of its Content-Length as malformed', async () => {
    const truncated = await startRawPeer((socket) =>
      socket.once('data', () => socket.end('HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly a little')),
    );
    await expectCode(getFrom(truncated), 'malformed_response');
  });

  it('refuses a redirect to a URL that cannot be parsed', async () => {
    const peer = await startPeer((_received, response) => response.writeHead(302, { Location: 'http://[bad' }).end());
    await expectCode(getFrom(peer), 'malformed_response');
  });

  it('needs a positive timeout', async () => {
    await expect(
      send(request({ api_url: 'http://127.0.0.1:1/', method: 'GET' }), { allowHosts: NO_ALLOW_HOSTS, timeoutMs: 0 }),
    ).rejects.toThrow(RangeError);
  });
});

describe('safeResponseHeaders', () => {
  it("keeps end-to-end headers and drops hop-by-hop, Content-Length, Alt-Svc and the target's x402 headers", () => {
    const headers = safeResponseHeaders({
      'content-type': 'text/plain',
      'content-encoding': 'gzip',
      'set-cookie': ['a=1', 'b=2'],
      'x-payment-response': 'e30=',
      'content-length': '10',
      'transfer-encoding': 'chunked',
      connection: 'close, x-hop',
      'x-hop': 'hop',
      'keep-alive': 'timeout=5',
      'proxy-authenticate': 'Basic',
      upgrade: 'h2c',
      trailer: 'x',
      'alt-svc': 'h3=":443"',
      vary: undefined,
    });
    expect(headers).toEqual({
      'content-type': 'text/plain',
      'content-encoding': 'gzip',
      'set-cookie': ['a=1', 'b=2'],
    });
  });
});
