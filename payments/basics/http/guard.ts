import { promises as dns } from 'node:dns';
import { isIP } from 'node:net';
import { classifyAddress, formatIpv4, parseIpv4, type AddressReason } from './address';
import { fail, ok, type Failure, type Ok, type Result } from '../result';
import type { OutboundErrorCode } from './errors';

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/** Resolves a host name to every address it has; the guard refuses the host if any is forbidden. */
export type Resolver = (hostname: string) => Promise<ResolvedAddress[]>;

export const systemResolver: Resolver = async (hostname) => {
  const answers = await dns.lookup(hostname, { all: true, order: 'verbatim' });
  return answers.map(({ address, family }) => ({ address, family: family === 6 ? 6 : 4 }));
};

/** Normalised "host:port" pairs (IPv6 hosts in brackets) exempt from the address check. */
export type AllowHosts = ReadonlySet<string>;

export const NO_ALLOW_HOSTS: AllowHosts = new Set();

/** A URL that passed the guard, with the addresses the connection must use. */
export interface VettedTarget {
  url: URL;
  /** Host name without brackets, for the TLS server name and the connection. */
  hostname: string;
  port: number;
  addresses: ResolvedAddress[];
  allowListed: boolean;
}

/** The guard's decision; a refusal for an address names it and its class (addressReason). */
export type UrlCheck =
  Ok<VettedTarget> | (Failure<OutboundErrorCode> & { address?: string; addressReason?: AddressReason });

const DEFAULT_PORTS: Record<string, number> = { 'http:': 80, 'https:': 443 };

const ALLOW_HOST_ENTRY = /^(\[[0-9A-Fa-f:.]+\]|[^\s:[\]/@?#]+):([0-9]{1,5})$/;

/**
 * Parses SSRF_ALLOW_HOSTS ("127.0.0.1:4010,localhost:4011,[::1]:4012"). Every entry needs a
 * port: an entry exempts exactly that host and port, never the host's other ports.
 */
export function parseAllowHosts(list: string | readonly string[]): Result<AllowHosts, 'invalid_allow_host'> {
  const entries = (typeof list === 'string' ? list.split(',') : list).map((entry) => entry.trim()).filter(Boolean);
  const allowHosts = new Set<string>();
  for (const entry of entries) {
    const [, host, portDigits] = ALLOW_HOST_ENTRY.exec(entry) ?? [];
    const port = portDigits === undefined ? 0 : Number(portDigits);
    const hostname = host === undefined ? null : normaliseHostname(host);
    if (hostname === null || port < 1 || port > 65535) {
      const details = `allow-list entry ${JSON.stringify(entry)} is not host:port (for example 127.0.0.1:4010)`;
      return fail('invalid_allow_host', details);
    }
    allowHosts.add(`${hostname}:${port}`);
  }
  return ok(allowHosts);
}

function normaliseHostname(host: string): string | null {
  try {
    return new URL(`http://${host}/`).hostname;
  } catch {
    return null;
  }
}

/**
 * Decides whether a URL may be called: http or https only, no credentials in the URL, and every
 * address the host resolves to must be public unless host:port is allow-listed. Literal IP
 * hosts are never sent to the resolver. Nothing is sent to the target.
 */
export async function checkUrl(url: string | URL, resolver: Resolver, allowHosts: AllowHosts): Promise<UrlCheck> {
  let parsed: URL;
  try {
    parsed = new URL(String(url));
  } catch {
    return refuse('invalid_url', `api_url ${JSON.stringify(String(url))} is not an absolute URL`);
  }
  const defaultPort = DEFAULT_PORTS[parsed.protocol];
  if (defaultPort === undefined) {
    return refuse('unsupported_scheme', `api_url scheme ${parsed.protocol} is not allowed; use http or https`);
  }
  if (parsed.username !== '' || parsed.password !== '') {
    return refuse('invalid_url', 'api_url must not carry credentials; use the auth field');
  }
  const hostname = parsed.hostname.replace(/^\[(.*)\]$/, '$1');
  const port = parsed.port === '' ? defaultPort : Number(parsed.port);
  const allowListed = allowHosts.has(`${parsed.hostname}:${port}`);

  const resolution = await resolve(hostname, resolver);
  if (!resolution.ok) return resolution;
  const addresses = resolution.value;

  if (!allowListed) {
    for (const { address } of addresses) {
      const verdict = classifyAddress(address);
      if (verdict.allowed) continue;
      const via = verdict.embeddedIpv4
        ? ` (${verdict.embeddedIpv4.kind.replace('_', '-')} ${verdict.embeddedIpv4.address})`
        : '';
      const where = address === hostname ? `host ${address} is` : `host ${parsed.hostname} resolves to ${address},`;
      const details = `api_url ${where} a ${verdict.reason.replaceAll('_', ' ')} address${via}; only public addresses may be called`;
      return { ...fail('ssrf_blocked', details), address, addressReason: verdict.reason };
    }
  }
  return ok({ url: parsed, hostname, port, addresses, allowListed });
}

async function resolve(hostname: string, resolver: Resolver): Promise<Result<ResolvedAddress[], 'unreachable'>> {
  const family = isIP(hostname);
  if (family !== 0) return ok([{ address: hostname, family: family === 6 ? 6 : 4 }]);
  // The URL parser already turns legacy IPv4 forms into dotted quads; this keeps a host that
  // reached us some other way from being handed to inet_aton behind our back.
  const legacyIpv4 = parseIpv4(hostname);
  if (legacyIpv4 !== null) return ok([{ address: formatIpv4(legacyIpv4), family: 4 }]);
  let addresses: ResolvedAddress[];
  try {
    addresses = await resolver(hostname);
  } catch (cause) {
    const code = (cause as { code?: string } | null)?.code;
    const details = `api_url host ${hostname} could not be resolved${code ? ` (${code})` : ''}`;
    return fail('unreachable', details);
  }
  if (addresses.length === 0) return fail('unreachable', `api_url host ${hostname} has no address`);
  // The family comes from the address itself: it is what the connection will use.
  return ok(addresses.map(({ address }) => ({ address, family: isIP(address) === 6 ? 6 : 4 })));
}

function refuse(code: 'invalid_url' | 'unsupported_scheme', details: string): UrlCheck {
  return fail(code, details);
}
