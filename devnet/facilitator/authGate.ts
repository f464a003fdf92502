// A facilitator that requires authentication, as hosted ones on mainnets do: an HTTP gate in front
// of a local facilitator (the x402 v1 or v2 one of devnet/facilitator/) that answers 401 to any
// call without valid credentials and forwards the others, under a path prefix as Coinbase's
// (`/platform/v2/x402/settle`).
//
// Credentials are either a CDP API key or a header set. A CDP key is checked as CDP checks it,
// with node:crypto alone (not the library that signs): `Authorization: Bearer <JWT>`, the JWT
// signed ES256 (P-256) or EdDSA (Ed25519) with the key's private half and verified with its
// public key; header `kid` the key's id; claims `iss: "cdp"`, `sub` the key's id, `nbf` and `exp`
// around now and at most two minutes apart, and `uris` naming this request: "METHOD host/path"
// with this gate's own host and the full path. Every call is recorded with the gate's verdict.
import { verify, type KeyObject } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { listenLocally, type RunningServer } from '../http.js';

export type FacilitatorCredentials =
  { kind: 'cdp'; keyId: string; publicKey: KeyObject } | { kind: 'headers'; headers: Record<string, string> };

export interface GateCall {
  method: string;
  path: string;
  /** Undefined: accepted and forwarded; else why it was refused with 401. */
  refused: string | undefined;
}

export interface FacilitatorAuthGate extends RunningServer {
  /** Where the service is pointed (FACILITATOR_URL): this gate's origin and prefix. */
  facilitatorUrl: string;
  calls: GateCall[];
  /** From now on, these credentials only (a key rotated or revoked at the facilitator). */
  setCredentials(credentials: FacilitatorCredentials): void;
}

/** CDP's JWTs live two minutes; a clock a few seconds off is tolerated. */
const MAX_LIFETIME_SECONDS = 120;
const CLOCK_SKEW_SECONDS = 5;
const MAX_BODY_BYTES = 1024 * 1024;

function decodeJson(part: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/** Why a CDP JWT does not authenticate `method host/path`, or undefined when it does. */
export function cdpJwtProblem(
  authorization: string | undefined,
  credentials: { keyId: string; publicKey: KeyObject },
  request: { method: string; host: string; path: string },
  nowSeconds = Math.floor(Date.now() / 1000),
): string | undefined {
  if (!authorization?.startsWith('Bearer ')) return 'no bearer token';
  const parts = authorization.slice('Bearer '.length).split('.');
  if (parts.length !== 3) return 'not a JWT';
  const [encodedHeader, encodedClaims, encodedSignature] = parts as [string, string, string];
  const header = decodeJson(encodedHeader);
  const claims = decodeJson(encodedClaims);
  if (!header || !claims) return 'not a JWT';
  const keyType = credentials.publicKey.asymmetricKeyType;
  const alg = keyType === 'ed25519' ? 'EdDSA' : 'ES256';
  if (header.alg !== alg) return `alg ${String(header.alg)} where the key signs ${alg}`;
  if (header.kid !== credentials.keyId) return 'kid is not the key id';
  const signed = Buffer.from(`${encodedHeader}.${encodedClaims}`);
  const signature = Buffer.from(encodedSignature, 'base64url');
  const valid =
    alg === 'EdDSA'
      ? verify(null, signed, credentials.publicKey, signature)
      : verify('sha256', signed, { key: credentials.publicKey, dsaEncoding: 'ieee-p1363' }, signature);
  if (!valid) return 'bad signature';
  if (claims.iss !== 'cdp') return 'iss is not cdp';
  if (claims.sub !== credentials.keyId) return 'sub is not the key id';
  const { nbf, exp } = claims;
  if (typeof nbf !== 'number' || typeof exp !== 'number') return 'no nbf or exp';
  if (nbf > nowSeconds + CLOCK_SKEW_SECONDS) return 'not valid yet';
  if (exp <= nowSeconds - CLOCK_SKEW_SECONDS) return 'expired';
  if (exp - nbf > MAX_LIFETIME_SECONDS) return 'lives too long';
  const uri = `${request.method} ${request.host}${request.path}`;
  if (!Array.isArray(claims.uris) || !claims.uris.includes(uri)) return `uris does not name ${uri}`;
  return undefined;
}

function headersProblem(request: IncomingMessage, headers: Record<string, string>): string | undefined {
  for (const [name, value] of Object.entries(headers))
    if (request.headers[name.toLowerCase()] !== value) return `${name} missing or wrong`;
  return undefined;
}

function readBody(request: IncomingMessage): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    request.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) chunks.push(chunk);
    });
    request.on('end', () => resolve(size > MAX_BODY_BYTES ? undefined : Buffer.concat(chunks)));
    request.on('error', reject);
  });
}

export async function startFacilitatorAuthGate(options: {
  /** The facilitator that answers once the gate lets a call through. */
  upstream: string;
  credentials: FacilitatorCredentials;
  /** The path the facilitator's routes sit under. */
  prefix?: string;
}): Promise<FacilitatorAuthGate> {
  const prefix = options.prefix ?? '/platform/v2/x402';
  const calls: GateCall[] = [];
  let host = '';
  let current = options.credentials;

  function judge(request: IncomingMessage, method: string, path: string): string | undefined {
    const credentials = current;
    if (credentials.kind === 'headers') return headersProblem(request, credentials.headers);
    return cdpJwtProblem(request.headers.authorization, credentials, { method, host, path });
  }

  async function serve(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const method = request.method ?? 'GET';
    const path = new URL(request.url ?? '/', 'http://gate.invalid').pathname;
    const body = await readBody(request);
    if (!path.startsWith(`${prefix}/`) || body === undefined) {
      response.writeHead(404, { 'content-type': 'application/json' }).end('{"errorType":"not_found"}');
      return;
    }
    const refused = judge(request, method, path);
    calls.push({ method, path, refused });
    if (refused !== undefined) {
      response
        .writeHead(401, { 'content-type': 'application/json' })
        .end(JSON.stringify({ errorType: 'unauthorized', errorMessage: `authentication failed: ${refused}` }));
      return;
    }
    const answer = await fetch(`${options.upstream}${path.slice(prefix.length)}`, {
      method,
      headers: { 'content-type': request.headers['content-type'] ?? 'application/json' },
      ...(method === 'GET' || method === 'HEAD' ? {} : { body }),
    });
    const text = await answer.text();
    response
      .writeHead(answer.status, { 'content-type': answer.headers.get('content-type') ?? 'application/json' })
      .end(text);
  }

  const server = await listenLocally((request, response) => {
    serve(request, response).catch((error: unknown) => {
      if (!response.headersSent) response.writeHead(502, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ errorType: 'upstream', errorMessage: String(error) }));
    });
  });
  host = new URL(server.url).host;
  return {
    ...server,
    facilitatorUrl: `${server.url}${prefix}`,
    calls,
    setCredentials: (credentials) => (current = credentials),
  };
}
