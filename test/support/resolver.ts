/** A DNS resolver for tests: no test reaches a real DNS server. */
import { isIP } from 'node:net';
import type { Resolver } from '../../payments/basics/http/index';

/** Resolves only the names in its table; every other name fails as unknown, so no test reaches a real DNS server. */
export function tableResolver(table: Record<string, string[]> = {}): Resolver & { calls: string[] } {
  const calls: string[] = [];
  const resolver = (hostname: string) => {
    calls.push(hostname);
    const addresses = table[hostname];
    if (!addresses)
      return Promise.reject(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' }));
    return Promise.resolve(
      addresses.map((address) => ({ address, family: isIP(address) === 6 ? (6 as const) : (4 as const) })),
    );
  };
  return Object.assign(resolver, { calls });
}
