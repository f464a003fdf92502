import { describe, expect, it } from 'vitest';
import {
  checkUrl,
  classifyAddress,
  NO_ALLOW_HOSTS,
  parseAllowHosts,
  parseIpv4,
  type AllowHosts,
} from '../../payments/basics/http';
import { tableResolver } from '../support/resolver';

function allow(list: string): AllowHosts {
  const parsed = parseAllowHosts(list);
  if (!parsed.ok) throw new Error(parsed.details);
  return parsed.value;
}

describe('parseIpv4 reads every legacy IPv4 form', () => {
  it.each([
    ['127.0.0.1', '127.0.0.1'],
    ['2130706433', '127.0.0.1'],
    ['0177.0.0.1', '127.0.0.1'],
    ['0x7f.0.0.1', '127.0.0.1'],
    ['0x7f000001', '127.0.0.1'],
    ['0X7F.1', '127.0.0.1'],
    ['127.1', '127.0.0.1'],
    ['127.0.1', '127.0.0.1'],
    ['017700000001', '127.0.0.1'],
    ['127.0.0.1.', '127.0.0.1'],
    ['0', '0.0.0.0'],
    ['0x', '0.0.0.0'],
    ['10.0x10.0377.1', '10.16.255.1'],
    ['4294967295', '255.255.255.255'],
  ])('%s is %s', (text, dotted) => {
    expect(parseIpv4(text)).toBe(parseIpv4(dotted));
    expect(parseIpv4(dotted)).not.toBeNull();
  });

  it.each([
    '4294967296',
    '256.0.0.1',
    '1.2.3.4.5',
    '08.0.0.1',
    '1.2.3.256',
    '127.0.0.1..',
    '',
    'example.com',
    '1.2.3.x',
    '0x1g',
  ])('%j is not an IPv4 address', (text) => {
    expect(parseIpv4(text)).toBeNull();
  });

  it('matches what the URL parser makes of the same hosts', () => {
    for (const host of ['2130706433', '0177.0.0.1', '0x7f.0.0.1', '0x7f000001', '127.1']) {
      expect(new URL(`http://${host}:8080/`).hostname).toBe('127.0.0.1');
    }
  });
});

describe('classifyAddress', () => {
  it.each([
    ['0.0.0.0', 'unspecified'],
    ['0.1.2.3', 'this_network'],
    ['10.0.0.1', 'private'],
    ['10.255.255.255', 'private'],
    ['100.64.0.1', 'shared'],
    ['100.127.255.254', 'shared'],
    ['127.0.0.1', 'loopback'],
    ['127.255.255.254', 'loopback'],
    ['169.254.169.254', 'link_local'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['192.0.0.8', 'reserved'],
    ['192.0.2.10', 'documentation'],
    ['192.88.99.1', 'reserved'],
    ['192.168.1.1', 'private'],
    ['198.18.0.1', 'benchmarking'],
    ['198.19.255.255', 'benchmarking'],
    ['198.51.100.7', 'documentation'],
    ['203.0.113.9', 'documentation'],
    ['224.0.0.251', 'multicast'],
    ['239.255.255.250', 'multicast'],
    ['240.0.0.1', 'reserved'],
    ['255.255.255.255', 'broadcast'],
    ['2130706433', 'loopback'],
    ['0177.0.0.1', 'loopback'],
    ['::', 'unspecified'],
    ['::1', 'loopback'],
    ['[::1]', 'loopback'],
    ['0:0:0:0:0:0:0:1', 'loopback'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:7f00:1', 'loopback'],
    ['::ffff:10.1.2.3', 'private'],
    ['::ffff:a01:203', 'private'],
    ['::ffff:169.254.169.254', 'link_local'],
    ['::ffff:100.64.0.1', 'shared'],
    ['::ffff:172.16.0.1', 'private'],
    ['::ffff:192.168.0.1', 'private'],
    ['::127.0.0.1', 'ipv4_compatible'],
    ['::8.8.8.8', 'ipv4_compatible'],
    ['64:ff9b::7f00:1', 'loopback'],
    ['64:ff9b::10.0.0.1', 'private'],
    ['64:ff9b::a9fe:a9fe', 'link_local'],
    ['64:ff9b::192.168.0.1', 'private'],
    ['64:ff9b::100.64.0.1', 'shared'],
    ['64:ff9b:1::8.8.8.8', 'nat64_local_use'],
    ['2002:7f00:1::', 'loopback'],
    ['2002:a00:1::1', 'private'],
    ['2002:c0a8:101::', 'private'],
    ['2001::1', 'teredo'],
    ['2001:0:4136:e378:8000:63bf:3fff:fdd2', 'teredo'],
    ['2001:2::1', 'reserved'],
    ['2001:db8::1', 'documentation'],
    ['3fff::1', 'documentation'],
    ['100::1', 'discard_only'],
    ['fc00::1', 'unique_local'],
    ['fd12:3456:789a::1', 'unique_local'],
    ['fe80::1', 'link_local'],
    ['febf:ffff::1', 'link_local'],
    ['fec0::1', 'site_local'],
    ['ff02::1', 'multicast'],
    ['4000::1', 'reserved'],
    ['fe80::1%eth0', 'scoped'],
    ['localhost', 'not_an_ip_address'],
    ['', 'not_an_ip_address'],
  ])('refuses %s as %s', (address, reason) => {
    expect(classifyAddress(address)).toMatchObject({ allowed: false, reason });
  });

  it.each([
    '8.8.8.8',
    '1.1.1.1',
    '172.32.0.1',
    '100.128.0.1',
    '192.169.0.1',
    '2606:4700::1111',
    '2a00:1450:4001::200e',
    '::ffff:8.8.8.8',
    '64:ff9b::808:808',
    '2002:808:808::1',
  ])('allows the public address %s', (address) => {
    expect(classifyAddress(address)).toMatchObject({ allowed: true, reason: 'public' });
  });

  it('names the IPv4 address an IPv6 address embeds', () => {
    expect(classifyAddress('::ffff:7f00:1').embeddedIpv4).toEqual({ kind: 'ipv4_mapped', address: '127.0.0.1' });
    expect(classifyAddress('64:ff9b::a00:1').embeddedIpv4).toEqual({ kind: 'nat64', address: '10.0.0.1' });
    expect(classifyAddress('2002:c0a8:101::').embeddedIpv4).toEqual({ kind: '6to4', address: '192.168.1.1' });
  });
});

describe('checkUrl', () => {
  it.each([
    'http://2130706433:8080/',
    'http://0177.0.0.1:8080/',
    'http://0x7f000001:8080/',
    'http://0x7f.0.0.1/',
    'http://127.1/',
    'http://127.0.0.1./',
    'http://[::1]/',
    'http://[::ffff:127.0.0.1]/',
    'http://[::ffff:7f00:1]/',
    'http://0.0.0.0/',
    'http://[::]/',
    'http://10.0.0.1/',
    'http://172.16.5.4/',
    'http://192.168.0.1/',
    'http://169.254.169.254/latest/meta-data/',
    'http://100.64.0.1/',
    'http://[fc00::1]/',
    'http://[fe80::1]/',
    'http://[::ffff:10.0.0.1]/',
    'http://[::ffff:169.254.169.254]/',
    'http://[64:ff9b::7f00:1]/',
    'http://[64:ff9b::a9fe:a9fe]/',
    'http://[2002:7f00:1::]/',
  ])('refuses the literal host of %s without resolving it', async (url) => {
    const resolver = tableResolver({});
    const check = await checkUrl(url, resolver, NO_ALLOW_HOSTS);
    expect(check.ok).toBe(false);
    if (!check.ok) expect(check.reason).toBe('ssrf_blocked');
    expect(resolver.calls).toEqual([]);
  });

  it.each([
    ['10.1.2.3', 'private'],
    ['172.20.0.1', 'private'],
    ['192.168.10.1', 'private'],
    ['169.254.169.254', 'link_local'],
    ['100.100.100.200', 'shared'],
    ['127.0.0.1', 'loopback'],
    ['fd00::1', 'unique_local'],
    ['fe80::abcd', 'link_local'],
    ['::ffff:192.168.0.1', 'private'],
    ['::ffff:7f00:1', 'loopback'],
    ['64:ff9b::c0a8:1', 'private'],
    ['64:ff9b::10.0.0.1', 'private'],
  ])('refuses a host name that resolves to %s (%s)', async (address, reason) => {
    const check = await checkUrl(
      'https://target.example/pay',
      tableResolver({ 'target.example': [address] }),
      NO_ALLOW_HOSTS,
    );
    expect(check).toMatchObject({ ok: false, address, addressReason: reason, reason: 'ssrf_blocked' });
  });

  it('refuses a host name when any one of its addresses is forbidden', async () => {
    const resolver = tableResolver({ 'mixed.example': ['8.8.8.8', '2606:4700::1111', '10.0.0.5'] });
    const check = await checkUrl('http://mixed.example/', resolver, NO_ALLOW_HOSTS);
    expect(check).toMatchObject({ ok: false, address: '10.0.0.5', addressReason: 'private' });
    if (!check.ok) expect(check.details).toContain('mixed.example resolves to 10.0.0.5');
  });

  it('allows a host name whose addresses are all public and returns them for the connection', async () => {
    const resolver = tableResolver({ 'public.example': ['8.8.8.8', '2606:4700::1111', '64:ff9b::808:808'] });
    const check = await checkUrl('https://public.example/x?y=1', resolver, NO_ALLOW_HOSTS);
    expect(check.ok).toBe(true);
    if (!check.ok) return;
    expect(check.value).toMatchObject({ hostname: 'public.example', port: 443, allowListed: false });
    expect(check.value.addresses).toEqual([
      { address: '8.8.8.8', family: 4 },
      { address: '2606:4700::1111', family: 6 },
      { address: '64:ff9b::808:808', family: 6 },
    ]);
    expect(resolver.calls).toEqual(['public.example']);
  });

  it.each(['http://8.8.8.8/', 'http://[2606:4700::1111]/', 'http://[::ffff:8.8.8.8]/', 'http://134744072/'])(
    'allows the public literal %s',
    async (url) => {
      const check = await checkUrl(url, tableResolver({}), NO_ALLOW_HOSTS);
      expect(check.ok).toBe(true);
    },
  );

  it.each([
    ['file:///etc/passwd', 'unsupported_scheme'],
    ['gopher://127.0.0.1:70/', 'unsupported_scheme'],
    ['ftp://8.8.8.8/', 'unsupported_scheme'],
    ['javascript:alert(1)', 'unsupported_scheme'],
    ['data:text/plain,hi', 'unsupported_scheme'],
    ['not a url', 'invalid_url'],
    ['/relative/path', 'invalid_url'],
    ['http://user:secret@8.8.8.8/', 'invalid_url'],
    ['http://[::1/', 'invalid_url'],
  ])('refuses %s with %s', async (url, code) => {
    const check = await checkUrl(url, tableResolver({}), NO_ALLOW_HOSTS);
    expect(check).toMatchObject({ ok: false, reason: code });
  });

  it('reports a name that does not resolve as unreachable', async () => {
    const check = await checkUrl('http://nowhere.example/', tableResolver({}), NO_ALLOW_HOSTS);
    expect(check).toMatchObject({ ok: false, reason: 'unreachable' });
    const empty = await checkUrl('http://empty.example/', tableResolver({ 'empty.example': [] }), NO_ALLOW_HOSTS);
    expect(empty).toMatchObject({ ok: false, reason: 'unreachable' });
  });

  it('refuses a resolver answer that is not an IP address', async () => {
    const check = await checkUrl(
      'http://odd.example/',
      tableResolver({ 'odd.example': ['localhost'] }),
      NO_ALLOW_HOSTS,
    );
    expect(check).toMatchObject({ ok: false, addressReason: 'not_an_ip_address' });
  });

  it('exempts exactly the allow-listed host and port', async () => {
    const allowHosts = allow('127.0.0.1:4010,localhost:4011,[::1]:4012');
    const resolver = tableResolver({ localhost: ['127.0.0.1', '::1'] });
    const decisions = async (url: string) => (await checkUrl(url, resolver, allowHosts)).ok;
    expect(await decisions('http://127.0.0.1:4010/')).toBe(true);
    expect(await decisions('http://2130706433:4010/')).toBe(true);
    expect(await decisions('https://127.0.0.1:4010/')).toBe(true);
    expect(await decisions('http://127.0.0.1:4011/')).toBe(false);
    expect(await decisions('http://127.0.0.1/')).toBe(false);
    expect(await decisions('http://127.0.0.2:4010/')).toBe(false);
    expect(await decisions('http://localhost:4011/')).toBe(true);
    expect(await decisions('http://LOCALHOST:4011/')).toBe(true);
    expect(await decisions('http://localhost:4010/')).toBe(false);
    expect(await decisions('http://127.0.0.1:4011/')).toBe(false);
    expect(await decisions('http://[::1]:4012/')).toBe(true);
    expect(await decisions('http://[::1]:4010/')).toBe(false);
  });

  it('marks an allow-listed target and still resolves it, so the connection uses the checked address', async () => {
    const resolver = tableResolver({ localhost: ['127.0.0.1'] });
    const check = await checkUrl('http://localhost:4011/', resolver, allow('localhost:4011'));
    expect(check).toMatchObject({
      ok: true,
      value: { allowListed: true, addresses: [{ address: '127.0.0.1', family: 4 }] },
    });
    expect(resolver.calls).toEqual(['localhost']);
  });
});

describe('parseAllowHosts', () => {
  it('normalises entries the way the URL parser writes hosts', () => {
    const parsed = parseAllowHosts(' LOCALHOST:4011 , [0:0::1]:4012,2130706433:80,127.0.0.1:4010 ');
    expect(parsed).toEqual({
      ok: true,
      value: new Set(['localhost:4011', '[::1]:4012', '127.0.0.1:80', '127.0.0.1:4010']),
    });
    expect(parseAllowHosts('')).toEqual({ ok: true, value: new Set() });
    expect(parseAllowHosts(['a.example:1'])).toEqual({ ok: true, value: new Set(['a.example:1']) });
  });

  it.each([
    '127.0.0.1',
    'localhost',
    'host:0',
    'host:65536',
    'http://host:80',
    '::1:80',
    'user@host:80',
    'host:80/path',
    '[::1]',
  ])('refuses %j: every entry names one port', (entry) => {
    const parsed = parseAllowHosts(`127.0.0.1:4010,${entry}`);
    expect(parsed).toMatchObject({ ok: false, reason: 'invalid_allow_host' });
    if (!parsed.ok) expect(parsed.details).toContain(JSON.stringify(entry));
  });
});
