import { isIPv6 } from 'node:net';

/**
 * Classifies an IP address for the SSRF guard. Only addresses that are globally routable
 * unicast are allowed: for IPv6 that means inside 2000::/3 minus its special blocks, plus the
 * translation prefixes (IPv4-mapped, NAT64, 6to4) whose embedded IPv4 address is itself public.
 */
export type AddressReason =
  | 'public'
  | 'not_an_ip_address'
  | 'scoped'
  | 'unspecified'
  | 'this_network'
  | 'private'
  | 'shared'
  | 'loopback'
  | 'link_local'
  | 'reserved'
  | 'documentation'
  | 'benchmarking'
  | 'multicast'
  | 'broadcast'
  | 'unique_local'
  | 'site_local'
  | 'ipv4_compatible'
  | 'nat64_local_use'
  | 'discard_only'
  | 'teredo';

export type Ipv4Embedding = 'ipv4_mapped' | 'nat64' | '6to4';

export interface AddressClass {
  allowed: boolean;
  reason: AddressReason;
  /** Set when an IPv6 address carries an IPv4 address that decided the outcome. */
  embeddedIpv4?: { kind: Ipv4Embedding; address: string };
}

type Ipv4Range = readonly [base: string, prefixLength: number, reason: AddressReason];

// IANA IPv4 special-purpose registry, most specific first.
const IPV4_BLOCKED: readonly Ipv4Range[] = [
  ['0.0.0.0', 32, 'unspecified'],
  ['255.255.255.255', 32, 'broadcast'],
  ['0.0.0.0', 8, 'this_network'],
  ['10.0.0.0', 8, 'private'],
  ['100.64.0.0', 10, 'shared'],
  ['127.0.0.0', 8, 'loopback'],
  ['169.254.0.0', 16, 'link_local'],
  ['172.16.0.0', 12, 'private'],
  ['192.0.0.0', 24, 'reserved'],
  ['192.0.2.0', 24, 'documentation'],
  ['192.88.99.0', 24, 'reserved'],
  ['192.168.0.0', 16, 'private'],
  ['198.18.0.0', 15, 'benchmarking'],
  ['198.51.100.0', 24, 'documentation'],
  ['203.0.113.0', 24, 'documentation'],
  ['224.0.0.0', 4, 'multicast'],
  ['240.0.0.0', 4, 'reserved'],
];

type Ipv6Range = readonly [base: string, prefixLength: number, reason: AddressReason];

// Blocks outside 2000::/3 are refused by the global-unicast rule; these are listed only to
// give a precise reason.
const IPV6_OUTSIDE_GLOBAL_UNICAST: readonly Ipv6Range[] = [
  ['::', 96, 'ipv4_compatible'],
  ['64:ff9b:1::', 48, 'nat64_local_use'],
  ['100::', 64, 'discard_only'],
  ['fc00::', 7, 'unique_local'],
  ['fe80::', 10, 'link_local'],
  ['fec0::', 10, 'site_local'],
  ['ff00::', 8, 'multicast'],
];

const IPV6_INSIDE_GLOBAL_UNICAST: readonly Ipv6Range[] = [
  ['2001::', 32, 'teredo'],
  ['2001:db8::', 32, 'documentation'],
  ['2001::', 23, 'reserved'],
  ['3fff::', 20, 'documentation'],
];

const IPV4_LABEL = /^(?:0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*)$/;

/**
 * Parses an IPv4 address in every form inet_aton and the WHATWG URL parser accept: one to four
 * parts, each decimal, octal (leading 0) or hex (0x), the last part filling the remaining bytes
 * ("127.1", "2130706433", "0177.0.0.1", "0x7f.1"), with one optional trailing dot.
 * Returns the address as an unsigned 32-bit number, or null when the text is not such a form.
 */
export function parseIpv4(text: string): number | null {
  const labels = text.split('.');
  if (labels.length > 1 && labels[labels.length - 1] === '') labels.pop();
  if (labels.length > 4) return null;
  const parts: number[] = [];
  for (const label of labels) {
    if (!IPV4_LABEL.test(label)) return null;
    parts.push(parseIpv4Label(label));
  }
  const last = parts.pop() as number;
  if (parts.some((part) => part > 255)) return null;
  if (last >= 256 ** (4 - parts.length)) return null;
  return parts.reduce((sum, part, index) => sum + part * 256 ** (3 - index), 0) + last;
}

function parseIpv4Label(label: string): number {
  if (/^0[xX]/.test(label)) return label.length === 2 ? 0 : parseInt(label.slice(2), 16);
  if (label.length > 1 && label.startsWith('0')) return parseInt(label, 8);
  return parseInt(label, 10);
}

export function formatIpv4(value: number): string {
  return [24, 16, 8, 0].map((shift) => (value >>> shift) & 0xff).join('.');
}

/** Parses an IPv6 address without zone (brackets allowed) into a 128-bit number. */
export function parseIpv6(text: string): bigint | null {
  const bare = stripBrackets(text);
  if (bare.includes('%') || !isIPv6(bare)) return null;
  const [head, tail] = withHexTail(bare).split('::') as [string, string | undefined];
  const headGroups = head === '' ? [] : head.split(':');
  const tailGroups = tail === undefined || tail === '' ? [] : tail.split(':');
  const zeros = tail === undefined ? [] : Array<string>(8 - headGroups.length - tailGroups.length).fill('0');
  return [...headGroups, ...zeros, ...tailGroups].reduce(
    (sum, group) => (sum << 16n) | BigInt(parseInt(group, 16)),
    0n,
  );
}

/** Rewrites a dotted IPv4 tail ("::ffff:127.0.0.1") as two hex groups. */
function withHexTail(address: string): string {
  const lastColon = address.lastIndexOf(':');
  const tail = address.slice(lastColon + 1);
  if (!tail.includes('.')) return address;
  const value = parseIpv4(tail) as number;
  return `${address.slice(0, lastColon + 1)}${(value >>> 16).toString(16)}:${(value & 0xffff).toString(16)}`;
}

function stripBrackets(text: string): string {
  return text.startsWith('[') && text.endsWith(']') ? text.slice(1, -1) : text;
}

export function classifyAddress(ip: string): AddressClass {
  const bare = stripBrackets(ip.trim());
  if (bare.includes('%')) {
    // A zone only makes sense for link-local and other non-global destinations.
    return isIPv6(bare) ? { allowed: false, reason: 'scoped' } : { allowed: false, reason: 'not_an_ip_address' };
  }
  const ipv6 = parseIpv6(bare);
  if (ipv6 !== null) return classifyIpv6(ipv6);
  const ipv4 = parseIpv4(bare);
  if (ipv4 !== null) return classifyIpv4(ipv4);
  return { allowed: false, reason: 'not_an_ip_address' };
}

function classifyIpv4(value: number): AddressClass {
  for (const [base, prefixLength, reason] of IPV4_BLOCKED) {
    if (inIpv4Prefix(value, parseIpv4(base) as number, prefixLength)) return { allowed: false, reason };
  }
  return { allowed: true, reason: 'public' };
}

function classifyIpv6(value: bigint): AddressClass {
  if (value === 0n) return { allowed: false, reason: 'unspecified' };
  if (value === 1n) return { allowed: false, reason: 'loopback' };
  if (inIpv6Prefix(value, '::ffff:0:0', 96)) return byEmbeddedIpv4('ipv4_mapped', value);
  if (inIpv6Prefix(value, '64:ff9b::', 96)) return byEmbeddedIpv4('nat64', value);
  for (const [base, prefixLength, reason] of IPV6_OUTSIDE_GLOBAL_UNICAST) {
    if (inIpv6Prefix(value, base, prefixLength)) return { allowed: false, reason };
  }
  if (!inIpv6Prefix(value, '2000::', 3)) return { allowed: false, reason: 'reserved' };
  for (const [base, prefixLength, reason] of IPV6_INSIDE_GLOBAL_UNICAST) {
    if (inIpv6Prefix(value, base, prefixLength)) return { allowed: false, reason };
  }
  // 6to4: 2002:AABB:CCDD::/48 routes to the IPv4 address AA.BB.CC.DD.
  if (inIpv6Prefix(value, '2002::', 16)) return byEmbeddedIpv4('6to4', value >> 80n);
  return { allowed: true, reason: 'public' };
}

function byEmbeddedIpv4(kind: Ipv4Embedding, bits: bigint): AddressClass {
  const ipv4 = Number(bits & 0xffffffffn);
  return { ...classifyIpv4(ipv4), embeddedIpv4: { kind, address: formatIpv4(ipv4) } };
}

function inIpv4Prefix(value: number, base: number, prefixLength: number): boolean {
  const shift = 32 - prefixLength;
  return Math.floor(value / 2 ** shift) === Math.floor(base / 2 ** shift);
}

function inIpv6Prefix(value: bigint, base: string, prefixLength: number): boolean {
  const shift = BigInt(128 - prefixLength);
  return value >> shift === (parseIpv6(base) as bigint) >> shift;
}
