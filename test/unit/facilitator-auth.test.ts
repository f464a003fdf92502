// The credentials for an authenticated facilitator: CDP_API_KEY_ID and CDP_API_KEY_SECRET, and
// FACILITATOR_HEADERS, read at start (a bad value stops it naming the variable, never showing the
// value), and the headers each call carries: a CDP JWT made by @coinbase/x402 for that one method,
// host and path, checked here as CDP checks it (devnet/facilitator/authGate.ts, node:crypto).
import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { cdpJwtProblem } from '../../devnet/facilitator/authGate';
import { ConfigError, loadConfig } from '../../payments/basics/config';
import { facilitatorHeaders } from '../../payments/incoming/facilitatorHeaders';

const FACILITATOR_URL = 'https://api.cdp.coinbase.com/platform/v2/x402';
const KEY_ID = 'organizations/org-1/apiKeys/key-1';

function ecKey(): { publicKey: KeyObject; pkcs8: string; sec1: string } {
  const { publicKey, privateKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  return {
    publicKey,
    pkcs8: privateKey.export({ format: 'pem', type: 'pkcs8' }).toString(),
    sec1: privateKey.export({ format: 'pem', type: 'sec1' }).toString(),
  };
}

/** CDP's Ed25519 secret: the base64 of the 32-byte seed and the 32-byte public key. */
function edKey(): { publicKey: KeyObject; secret: string } {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const jwk = privateKey.export({ format: 'jwk' });
  const secret = Buffer.concat([Buffer.from(jwk.d!, 'base64url'), Buffer.from(jwk.x!, 'base64url')]).toString('base64');
  return { publicKey, secret };
}

function refusal(env: Record<string, string>): ConfigError {
  try {
    loadConfig(env);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return error as ConfigError;
  }
  throw new Error('the configuration was accepted');
}

describe('facilitator credentials at start', () => {
  it('none: no authentication, as before', () => {
    expect(loadConfig({ FACILITATOR_URL }).facilitatorAuth).toBeUndefined();
  });

  it('a CDP key in PKCS#8, SEC1 with its line breaks written \\n, or Ed25519 base64', () => {
    const key = ecKey();
    for (const secret of [key.pkcs8, key.sec1.trim().replace(/\n/g, '\\n'), edKey().secret]) {
      const { facilitatorAuth } = loadConfig({ FACILITATOR_URL, CDP_API_KEY_ID: KEY_ID, CDP_API_KEY_SECRET: secret });
      expect(facilitatorAuth).toMatchObject({
        cdp: { apiKeyId: KEY_ID },
        headers: {},
        variables: ['CDP_API_KEY_ID', 'CDP_API_KEY_SECRET'],
      });
    }
  });

  it('refuses half a CDP key, a secret that is no key, and never shows the secret', () => {
    expect(refusal({ FACILITATOR_URL, CDP_API_KEY_ID: KEY_ID }).variable).toBe('CDP_API_KEY_SECRET');
    expect(refusal({ FACILITATOR_URL, CDP_API_KEY_SECRET: ecKey().pkcs8 }).variable).toBe('CDP_API_KEY_ID');
    const notAKey = 'c2VjcmV0LXRoYXQtaXMtbm90LWEta2V5';
    const error = refusal({ FACILITATOR_URL, CDP_API_KEY_ID: KEY_ID, CDP_API_KEY_SECRET: notAKey });
    expect(error.variable).toBe('CDP_API_KEY_SECRET');
    expect(error.message).not.toContain(notAKey);
    // A key on another curve than CDP's P-256.
    const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'secp256k1' });
    const k1 = privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
    expect(refusal({ FACILITATOR_URL, CDP_API_KEY_ID: KEY_ID, CDP_API_KEY_SECRET: k1 }).variable).toBe(
      'CDP_API_KEY_SECRET',
    );
  });

  it('FACILITATOR_HEADERS: a JSON object of header names to strings, names kept in lower case', () => {
    const { facilitatorAuth } = loadConfig({
      FACILITATOR_URL,
      FACILITATOR_HEADERS: '{"X-Api-Key": "k-1", "Authorization": "Bearer abc:def"}',
    });
    expect(facilitatorAuth).toEqual({
      cdp: undefined,
      headers: { 'x-api-key': 'k-1', authorization: 'Bearer abc:def' },
      variables: ['FACILITATOR_HEADERS'],
    });
  });

  it.each([
    ['not JSON', 'X-Api-Key: hidden-value-1'],
    ['an array', '["hidden-value-1"]'],
    ['a number value', '{"X-Api-Key": 12345}'],
    ['a name that is no header name', '{"X Api Key": "hidden-value-1"}'],
    ['a header the service writes', '{"Content-Type": "hidden-value-1"}'],
    ['a line break in a value', '{"X-Api-Key": "hidden-value-1\\r\\nX-Other: 1"}'],
    ['an empty value', '{"X-Api-Key": " "}'],
    ['a name given twice', '{"X-Api-Key": "hidden-value-1", "x-api-key": "hidden-value-1"}'],
  ])('FACILITATOR_HEADERS refused: %s, the value never shown', (_case, value) => {
    const error = refusal({ FACILITATOR_URL, FACILITATOR_HEADERS: value });
    expect(error.variable).toBe('FACILITATOR_HEADERS');
    expect(error.message).not.toContain('hidden-value-1');
  });

  it('refuses headers without FACILITATOR_URL, credentials over plain http to another host, or twice as Authorization', () => {
    const key = ecKey().pkcs8;
    // A CDP key in the environment for another of Coinbase's tools: not ours to use, nor to refuse.
    expect(loadConfig({ CDP_API_KEY_ID: KEY_ID, CDP_API_KEY_SECRET: 'not-read' }).facilitatorAuth).toBeUndefined();
    expect(refusal({ FACILITATOR_HEADERS: '{"X-Api-Key": "k"}' }).message).toBe(
      'FACILITATOR_HEADERS: is set but FACILITATOR_URL is not: the headers are for the facilitator it names',
    );
    expect(
      refusal({ FACILITATOR_URL: 'http://facilitator.example.org', FACILITATOR_HEADERS: '{"X-Api-Key": "k"}' })
        .variable,
    ).toBe('FACILITATOR_URL');
    expect(
      loadConfig({ FACILITATOR_URL: 'http://127.0.0.1:4021', FACILITATOR_HEADERS: '{"X-Api-Key": "k"}' })
        .facilitatorAuth?.headers,
    ).toEqual({ 'x-api-key': 'k' });
    expect(
      refusal({
        FACILITATOR_URL,
        CDP_API_KEY_ID: KEY_ID,
        CDP_API_KEY_SECRET: key,
        FACILITATOR_HEADERS: '{"Authorization": "Bearer x"}',
      }).variable,
    ).toBe('FACILITATOR_HEADERS');
    expect(
      refusal({
        FACILITATOR_URL: 'https://user:pass@facilitator.example.org',
        CDP_API_KEY_ID: KEY_ID,
        CDP_API_KEY_SECRET: key,
      }).variable,
    ).toBe('FACILITATOR_URL');
  });
});

describe('the headers of each call to the facilitator', () => {
  const settle = new URL(`${FACILITATOR_URL}/settle`);

  it.each([
    ['ES256 (EC P-256)', () => ecKey(), (key: { pkcs8: string }) => key.pkcs8],
    ['EdDSA (Ed25519)', () => edKey(), (key: { secret: string }) => key.secret],
  ] as const)(
    '%s: a JWT CDP accepts for that method, host and path only, for two minutes',
    async (_alg, make, secretOf) => {
      const key = make();
      const auth = loadConfig({
        FACILITATOR_URL,
        CDP_API_KEY_ID: KEY_ID,
        CDP_API_KEY_SECRET: (secretOf as (key: unknown) => string)(key),
        FACILITATOR_HEADERS: '{"X-Extra": "e"}',
      }).facilitatorAuth;
      const headers = await facilitatorHeaders(auth, 'POST', settle);
      expect(headers['x-extra']).toBe('e');
      expect(headers['correlation-context']).toContain('source=x402');
      const credentials = { keyId: KEY_ID, publicKey: key.publicKey };
      const request = { method: 'POST', host: 'api.cdp.coinbase.com', path: '/platform/v2/x402/settle' };
      expect(cdpJwtProblem(headers.authorization, credentials, request)).toBeUndefined();
      expect(cdpJwtProblem(headers.authorization, credentials, { ...request, method: 'GET' })).toMatch(/^uris/);
      expect(
        cdpJwtProblem(headers.authorization, credentials, { ...request, path: '/platform/v2/x402/verify' }),
      ).toMatch(/^uris/);
      expect(
        cdpJwtProblem(headers.authorization, credentials, { ...request, host: 'facilitator.example.org' }),
      ).toMatch(/^uris/);
      const now = Math.floor(Date.now() / 1000);
      expect(cdpJwtProblem(headers.authorization, credentials, request, now + 130)).toBe('expired');
      expect(cdpJwtProblem(headers.authorization, { ...credentials, keyId: 'another' }, request)).toBe(
        'kid is not the key id',
      );
      expect(cdpJwtProblem(headers.authorization, { ...credentials, publicKey: make().publicKey }, request)).toBe(
        'bad signature',
      );
      // A new token for every call.
      expect((await facilitatorHeaders(auth, 'POST', settle)).authorization).not.toBe(headers.authorization);
    },
  );

  it('without credentials, none', async () => {
    expect(await facilitatorHeaders(undefined, 'GET', settle)).toEqual({});
  });
});
