/**
 * How we authenticate to the facilitator (FACILITATOR_URL), read from the environment once at start.
 *
 * Hosted facilitators on mainnets require it. Two ways, which may be combined:
 * - CDP_API_KEY_ID and CDP_API_KEY_SECRET (the names of Coinbase's own documentation): Coinbase's
 *   scheme, a short-lived JWT signed with the key's secret (ES256 for an EC key in PEM, EdDSA for a
 *   base64 Ed25519 key) and bound to one method, host and path, made per request through
 *   @coinbase/x402 (payments/incoming/facilitatorHeaders.ts).
 * - FACILITATOR_HEADERS: a JSON object of header names to values, sent as they are on every call
 *   (`{"X-Api-Key": "..."}`) for any other facilitator.
 *
 * A value that cannot be used is refused here, with the variable named and the value never shown.
 * Its own module, importing nothing, so that the configuration and the facilitator's client both
 * read it without importing each other.
 */
import { createPrivateKey } from 'node:crypto';

export interface CdpApiKey {
  /** CDP_API_KEY_ID: the key's name (`organizations/.../apiKeys/...` or a bare id), the JWT's `kid` and `sub`. */
  apiKeyId: string;
  /** CDP_API_KEY_SECRET, normalised: an EC key as PKCS#8 PEM, or the base64 of an Ed25519 seed and public key. */
  apiKeySecret: string;
}

export interface FacilitatorAuth {
  cdp: CdpApiKey | undefined;
  /** FACILITATOR_HEADERS, names in lower case. */
  headers: Record<string, string>;
  /** The variables the credentials came from, for messages: never their values. */
  variables: string[];
}

export type FacilitatorAuthError = { variable: string; problem: string };

type Env = Record<string, string | undefined>;

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Headers the client itself writes for every exchange: a configured value would corrupt the request. */
const RESERVED_HEADERS = new Set([
  'host',
  'content-length',
  'content-type',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'upgrade',
  'te',
  'trailer',
  'expect',
  'accept',
]);
/** A header set is a few credentials; more is a mistake. */
const MAX_HEADERS = 32;
const MAX_HEADER_VALUE_CHARS = 8_192;

function text(env: Env, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value.trim() === '' ? undefined : value.trim();
}

/**
 * The secret as @coinbase/x402 signs with. An EC key may come as PKCS#8 (`BEGIN PRIVATE KEY`) or
 * SEC1 (`BEGIN EC PRIVATE KEY`, as older CDP keys are downloaded), with its line breaks written
 * as `\n` (as in a .env file); it must be on P-256. An Ed25519 key is the base64 of 64 bytes.
 */
function cdpSecret(raw: string): string | undefined {
  if (raw.includes('-----BEGIN')) {
    const pem = raw.replace(/\\n/g, '\n');
    try {
      const key = createPrivateKey({ key: pem, format: 'pem' });
      if (key.asymmetricKeyType !== 'ec' || key.asymmetricKeyDetails?.namedCurve !== 'prime256v1') return undefined;
      return key.export({ format: 'pem', type: 'pkcs8' }).toString();
    } catch {
      return undefined;
    }
  }
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(raw) || Buffer.from(raw, 'base64').length !== 64) return undefined;
  return raw;
}

function cdpApiKey(env: Env): CdpApiKey | FacilitatorAuthError | undefined {
  const apiKeyId = text(env, 'CDP_API_KEY_ID');
  const rawSecret = text(env, 'CDP_API_KEY_SECRET');
  if (apiKeyId === undefined && rawSecret === undefined) return undefined;
  if (apiKeyId === undefined) return { variable: 'CDP_API_KEY_ID', problem: 'required when CDP_API_KEY_SECRET is set' };
  if (rawSecret === undefined)
    return { variable: 'CDP_API_KEY_SECRET', problem: 'required when CDP_API_KEY_ID is set' };
  if (!/^[\x21-\x7e]{1,512}$/.test(apiKeyId))
    return { variable: 'CDP_API_KEY_ID', problem: 'expected the key id or name, printable and without spaces' };
  const apiKeySecret = cdpSecret(rawSecret);
  if (apiKeySecret === undefined)
    return {
      variable: 'CDP_API_KEY_SECRET',
      problem:
        'expected an EC (P-256) private key in PEM (BEGIN PRIVATE KEY or BEGIN EC PRIVATE KEY) or a base64 Ed25519 key of 64 bytes (value not shown)',
    };
  return { apiKeyId, apiKeySecret };
}

function headerSet(env: Env): Record<string, string> | FacilitatorAuthError {
  const raw = text(env, 'FACILITATOR_HEADERS');
  if (raw === undefined) return {};
  const refused = (problem: string): FacilitatorAuthError => ({ variable: 'FACILITATOR_HEADERS', problem });
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return refused('expected a JSON object of header names to values, e.g. {"X-Api-Key": "..."} (value not shown)');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    return refused('expected a JSON object of header names to values, e.g. {"X-Api-Key": "..."}');
  const entries = Object.entries(parsed as Record<string, unknown>);
  if (entries.length > MAX_HEADERS) return refused(`at most ${MAX_HEADERS} headers`);
  const headers: Record<string, string> = {};
  for (const [name, value] of entries) {
    const lower = name.toLowerCase();
    if (!TOKEN.test(name)) return refused(`"${name.slice(0, 64)}" is not a header name`);
    if (RESERVED_HEADERS.has(lower)) return refused(`${name} is written by the service itself and cannot be set`);
    if (lower in headers) return refused(`${name} is given twice`);
    if (typeof value !== 'string') return refused(`the value of ${name} must be a string`);
    // eslint-disable-next-line no-control-regex
    if (value.length > MAX_HEADER_VALUE_CHARS || /[\x00-\x08\x0a-\x1f\x7f]/.test(value) || value.trim() === '')
      return refused(`the value of ${name} is empty, too long or holds control characters (value not shown)`);
    headers[lower] = value;
  }
  return headers;
}

function isError(value: unknown): value is FacilitatorAuthError {
  return typeof value === 'object' && value !== null && 'problem' in value;
}

/**
 * The credentials for the facilitator, undefined when none is configured, or the first problem
 * found. Without FACILITATOR_URL, a CDP key is not used and not read (Coinbase's other tools read
 * the same two variables, so a shell may hold them for another purpose), while FACILITATOR_HEADERS,
 * which means nothing else, is refused: the operator surely meant to settle through a facilitator.
 */
export function parseFacilitatorAuth(
  env: Env,
  facilitatorUrl: string | undefined,
): FacilitatorAuth | FacilitatorAuthError | undefined {
  if (facilitatorUrl === undefined && text(env, 'FACILITATOR_HEADERS') === undefined) return undefined;
  const cdp = facilitatorUrl === undefined ? undefined : cdpApiKey(env);
  if (isError(cdp)) return cdp;
  const headers = headerSet(env);
  if (isError(headers)) return headers;
  const variables = [
    ...(cdp ? ['CDP_API_KEY_ID', 'CDP_API_KEY_SECRET'] : []),
    ...(Object.keys(headers).length > 0 ? ['FACILITATOR_HEADERS'] : []),
  ];
  if (variables.length === 0) return undefined;
  if (cdp && Object.hasOwn(headers, 'authorization'))
    return {
      variable: 'FACILITATOR_HEADERS',
      problem: 'sets Authorization, which CDP_API_KEY_ID and CDP_API_KEY_SECRET make: use one or the other',
    };
  if (facilitatorUrl === undefined)
    return {
      variable: 'FACILITATOR_HEADERS',
      problem: 'is set but FACILITATOR_URL is not: the headers are for the facilitator it names',
    };
  const { username, password } = new URL(facilitatorUrl);
  if ((username !== '' || password !== '') && (cdp || Object.hasOwn(headers, 'authorization')))
    return {
      variable: 'FACILITATOR_URL',
      problem: `carries a user name or password (Basic authorization) while ${variables.join(', ')} ${variables.length > 1 ? 'set' : 'sets'} Authorization: use one or the other`,
    };
  if (!sentPrivately(facilitatorUrl))
    return {
      variable: 'FACILITATOR_URL',
      problem: `must be https when ${variables.join(', ')} ${variables.length > 1 ? 'are' : 'is'} set (http only on a loopback address)`,
    };
  return { cdp, headers, variables };
}

/** Credentials go only over https, or over http to this machine (a local facilitator). */
function sentPrivately(facilitatorUrl: string): boolean {
  const url = new URL(facilitatorUrl);
  if (url.protocol === 'https:') return true;
  return ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname) || /^127\.\d+\.\d+\.\d+$/.test(url.hostname);
}

export function isFacilitatorAuthError(
  value: FacilitatorAuth | FacilitatorAuthError | undefined,
): value is FacilitatorAuthError {
  return isError(value);
}
