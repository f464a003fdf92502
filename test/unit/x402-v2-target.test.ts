// Paying a target that speaks x402 version 2: its 402 read from the PAYMENT-REQUIRED header (before
// a version 1 body), checked field by field, chosen in our version 1 shape, and answered with a
// PAYMENT-SIGNATURE whose `accepted` is the offered entry verbatim. The reference server's own
// matcher (@x402/core's x402ResourceServer) and viem's verifyTypedData judge what we build.
import { decodePaymentSignatureHeader, encodePaymentRequiredHeader } from '@x402/core/http';
import { x402ResourceServer } from '@x402/core/server';
import { verifyTypedData, type Address, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { describe, expect, it } from 'vitest';
import type { NetworkSettings } from '../../payments/basics/config';
import type { Chains } from '../../payments/chains/index';
import { createEvmChains, transferWithAuthorizationTypes } from '../../payments/chains/evm';
import { buildTargetRequest } from '../../payments/basics/http/index';
import { decidePayment, paymentRequiredOf } from '../../payments/outgoing/call';
import { reportedSettlement, signTargetPayment, type TargetPayment } from '../../payments/outgoing/pay';
import type { TargetResponse } from '../../payments/basics/http/index';
import { decodePaymentHeader } from '../../payments/x402/headers';
import {
  MAX_ACCEPTS_ENTRIES,
  MAX_PAYMENT_REQUIRED_HEADER_CHARS,
  readTargetPaymentRequired,
} from '../../payments/x402/parse';
import { TARGET_X402_RESPONSE_HEADERS as V2_RESPONSE_HEADERS } from '../../payments/x402/v2';
import { TARGET_X402_RESPONSE_HEADERS as OUTBOUND_RESPONSE_HEADERS } from '../../payments/basics/http/headers';
import { safeResponseHeaders } from '../../payments/basics/http/index';
import { PAYMENT_SCHEMES } from '../../payments/chains/registry';

const TEST_KEY: Hex = '0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318';
const SERVICE = privateKeyToAccount(TEST_KEY).address;
const PAY_TO: Address = '0x209693Bc6afc0C5328bA36FaF03C514EF312287C';
const USDC_BASE_SEPOLIA: Address = '0x036CbD53842c5426634e7929541eC2318f3dCF7e';
const NOW = new Date('2026-03-01T12:00:00.000Z');
const NOW_SECONDS = 1_772_366_400n;

const networks: NetworkSettings[] = [
  { name: 'base-sepolia', rpcUrl: 'http://127.0.0.1:9', usdc: USDC_BASE_SEPOLIA },
  { name: 'solana-devnet', rpcUrl: 'http://127.0.0.1:9', usdc: '4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU' },
];

/** An entry as @x402/express 2.27 offers it, with a field of its own that must be echoed too. */
const evmEntry = {
  scheme: 'exact',
  network: 'eip155:84532',
  amount: '12345',
  asset: USDC_BASE_SEPOLIA,
  payTo: PAY_TO,
  maxTimeoutSeconds: 300,
  extra: { name: 'USDC', version: '2', nested: { b: 2, a: 1 } },
};
const svmEntry = {
  scheme: 'exact',
  network: 'solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1',
  amount: '2500',
  asset: '4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU',
  payTo: '9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin',
  maxTimeoutSeconds: 60,
  extra: { feePayer: '2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4' },
};
const resource = { url: 'http://127.0.0.1:4021/paid', description: 'paid route', mimeType: 'application/json' };

function required(accepts: unknown[], changes: Record<string, unknown> = {}) {
  return { x402Version: 2, error: 'Payment required', resource, accepts, ...changes };
}

function header(value: unknown): string {
  return Buffer.from(JSON.stringify(value), 'utf8').toString('base64');
}

function response(status: number, headers: Record<string, string>, body: unknown = {}): TargetResponse {
  return { status, headers, body: Buffer.from(JSON.stringify(body)), url: resource.url };
}

const v1Body = {
  x402Version: 1,
  error: 'X-PAYMENT header is required',
  accepts: [
    {
      scheme: 'exact',
      network: 'base-sepolia',
      maxAmountRequired: '5000',
      resource: resource.url,
      description: 'v1',
      mimeType: 'application/json',
      payTo: PAY_TO,
      maxTimeoutSeconds: 60,
      asset: USDC_BASE_SEPOLIA,
      extra: { name: 'USDC', version: '2' },
    },
  ],
};

describe('reading a version 2 402 (PAYMENT-REQUIRED)', () => {
  it('reads the header as @x402/core encodes it, converts each entry to our version 1 shape and keeps it verbatim', () => {
    const parsed = readTargetPaymentRequired(
      encodePaymentRequiredHeader(required([evmEntry, svmEntry]) as Parameters<typeof encodePaymentRequiredHeader>[0]),
      undefined,
    );
    if (parsed?.x402Version !== 2) throw new Error('not read as version 2');
    expect(parsed.error).toBe('Payment required');
    expect(parsed.skipped).toEqual([]);
    expect(parsed.accepts).toEqual([
      {
        scheme: 'exact',
        network: 'base-sepolia',
        maxAmountRequired: '12345',
        resource: resource.url,
        description: 'paid route',
        mimeType: 'application/json',
        payTo: PAY_TO,
        maxTimeoutSeconds: 300,
        asset: USDC_BASE_SEPOLIA,
        extra: evmEntry.extra,
      },
      expect.objectContaining({ network: 'solana-devnet', maxAmountRequired: '2500', extra: svmEntry.extra }),
    ]);
    expect(parsed.offers.map((offer) => offer.accepted)).toStrictEqual([evmEntry, svmEntry]);
    expect(parsed.offers[0]!.resource).toStrictEqual(resource);
  });

  it('prefers the header to a version 1 body, and falls back to the body when the header is absent or unreadable', () => {
    const both = paymentRequiredOf(response(402, { 'payment-required': header(required([evmEntry])) }, v1Body));
    expect(both).toMatchObject({ x402Version: 2, accepts: [{ maxAmountRequired: '12345' }] });
    const bodyOnly = paymentRequiredOf(response(402, {}, v1Body));
    expect(bodyOnly).toMatchObject({ x402Version: 1, accepts: [{ maxAmountRequired: '5000' }] });
    expect(bodyOnly).not.toHaveProperty('offers');
    const badHeader = paymentRequiredOf(response(402, { 'payment-required': 'not base64!' }, v1Body));
    expect(badHeader).toMatchObject({ x402Version: 1 });
    // An @x402/express 402: the body is {} and the offer only in the header.
    expect(paymentRequiredOf(response(402, { 'payment-required': 'e30=' }, {}))).toBeUndefined();
    expect(paymentRequiredOf(response(200, { 'payment-required': header(required([evmEntry])) }))).toBeUndefined();
  });

  it.each([
    ['not a string', 42, 'invalid_header'],
    ['empty', '  ', 'invalid_header'],
    ['not base64', 'a b c', 'invalid_header'],
    [
      'too long',
      header({ ...required([evmEntry]), padding: 'x'.repeat(MAX_PAYMENT_REQUIRED_HEADER_CHARS) }),
      'body_too_large',
    ],
    ['base64 of no JSON', Buffer.from('{nope').toString('base64'), 'invalid_json'],
    ['not an object', header([1]), 'not_an_object'],
    ['version 1 in the header', header({ ...required([evmEntry]), x402Version: 1 }), 'unsupported_x402_version'],
    ['version as a string', header({ ...required([evmEntry]), x402Version: '2' }), 'unsupported_x402_version'],
    ['no resource', header({ x402Version: 2, accepts: [evmEntry] }), 'invalid_resource'],
    ['a resource without url', header(required([evmEntry], { resource: { description: 'x' } })), 'invalid_resource'],
    [
      'a resource with a numeric mimeType',
      header(required([evmEntry], { resource: { url: 'u', mimeType: 1 } })),
      'invalid_resource',
    ],
    ['no accepts', header({ x402Version: 2, resource }), 'missing_accepts'],
  ])('refuses a header that is %s: not an x402 402', (_case, value, reason) => {
    expect(readTargetPaymentRequired(value as string, undefined), reason).toBeUndefined();
  });

  it.each([
    [{ ...evmEntry, amount: 12345 }, 'invalid_field', 'amount'],
    [{ ...evmEntry, amount: '1.5' }, 'invalid_amount', 'amount'],
    [{ ...evmEntry, amount: '012' }, 'invalid_amount', 'amount'],
    [{ ...evmEntry, amount: (1n << 256n).toString() }, 'invalid_amount', 'amount'],
    [{ ...evmEntry, maxAmountRequired: '12345', amount: undefined }, 'missing_field', 'amount'],
    [{ ...evmEntry, network: '' }, 'invalid_field', 'network'],
    [{ ...evmEntry, payTo: null }, 'missing_field', 'payTo'],
    [{ ...evmEntry, asset: ['x'] }, 'invalid_field', 'asset'],
    [{ ...evmEntry, maxTimeoutSeconds: 0 }, 'invalid_field', 'maxTimeoutSeconds'],
    [{ ...evmEntry, maxTimeoutSeconds: 1.5 }, 'invalid_field', 'maxTimeoutSeconds'],
    [{ ...evmEntry, maxTimeoutSeconds: undefined }, 'missing_field', 'maxTimeoutSeconds'],
    [{ ...evmEntry, extra: 'USDC' }, 'invalid_field', 'extra'],
  ])('skips a malformed entry with its reason and keeps the good ones (%#)', (bad, reason, field) => {
    const parsed = readTargetPaymentRequired(header(required([bad, evmEntry, 'x'])), undefined);
    if (parsed?.x402Version !== 2) throw new Error('not read as version 2');
    expect(parsed.skipped).toEqual([
      expect.objectContaining({ index: 0, reason, field }),
      expect.objectContaining({ index: 2, reason: 'not_an_object' }),
    ]);
    expect(parsed.accepts).toHaveLength(1);
    expect(parsed.offers.map((offer) => offer.accepted)).toStrictEqual([evmEntry]);
  });

  it('reads at most MAX_ACCEPTS_ENTRIES entries', () => {
    const parsed = readTargetPaymentRequired(
      header(required(Array.from({ length: MAX_ACCEPTS_ENTRIES + 2 }, () => evmEntry))),
      undefined,
    );
    expect(parsed?.accepts.length).toBe(MAX_ACCEPTS_ENTRIES);
    expect(parsed?.skipped.map((skip) => skip.reason)).toEqual(['too_many_entries', 'too_many_entries']);
  });

  it('keeps an entry on a network we do not know in its CAIP-2 spelling, for the choice to refuse', () => {
    const other = { ...evmEntry, network: 'eip155:61' };
    const read = readTargetPaymentRequired(header(required([other])), '{}');
    expect(read?.accepts[0]?.network).toBe('eip155:61');
  });
});

function chainsStub(): Chains {
  const evm = createEvmChains({ networks, evmPrivateKey: TEST_KEY });
  return {
    networks: [],
    evm,
    svm: undefined as never,
    network: () => undefined,
    // We pay on base-sepolia only: a Solana offer before it is refused, and the second entry chosen.
    payingNetworks: () => networks.filter((settings) => settings.name === 'base-sepolia'),
    async createPayment(choice, { now, nonce }) {
      const signed = await evm.signTransferAuthorization(choice.requirements, { now, nonce });
      if (!signed.ok) return signed;
      const { network, payment, header: value, authorization } = signed.value;
      return {
        ok: true,
        value: {
          network,
          payment,
          header: value,
          payer: authorization.from,
          reference: authorization.nonce,
          expiresAt: { unixSeconds: authorization.validBefore },
        },
      };
    },
    close: async () => {},
  };
}

async function payFor(target: TargetResponse, windowSeconds = 120): Promise<TargetPayment> {
  const chains = chainsStub();
  const read = paymentRequiredOf(target);
  if (!read) throw new Error('not an x402 402');
  const decision = decidePayment(read, { chains, maxAmountMicroUsdc: 1_000_000n });
  if (!decision.ok) throw new Error(decision.details);
  const deps = {
    chains,
    clock: { now: () => NOW },
    balances: { evmShortage: () => Promise.resolve(undefined) },
  } as unknown as Parameters<typeof signTargetPayment>[0];
  const signed = await signTargetPayment(deps, decision.value, { windowSeconds });
  if (!signed.ok) throw new Error(`${signed.reason}: ${signed.details}`);
  return signed.value;
}

describe('the PAYMENT-SIGNATURE we build for a version 2 target', () => {
  it('echoes the offered entry and resource verbatim, with our EIP-3009 payload, and the reference server matches it', async () => {
    const offered = required([svmEntry, evmEntry], { extensions: { bazaar: { info: 1 } } });
    const payment = await payFor(response(402, { 'payment-required': header(offered) }));
    expect(payment.x402Version).toBe(2);

    const decoded = decodePaymentSignatureHeader(payment.header);
    expect(Object.keys(decoded).sort()).toEqual(['accepted', 'extensions', 'payload', 'resource', 'x402Version']);
    expect(decoded.x402Version).toBe(2);
    expect(decoded.accepted).toStrictEqual(evmEntry);
    expect(decoded.resource).toStrictEqual(resource);
    expect(decoded.extensions).toStrictEqual({ bazaar: { info: 1 } });

    // The payload is the one X-PAYMENT would carry: signature and authorization, nothing else.
    const payload = decoded.payload as {
      signature: Hex;
      authorization: { from: Address; to: Address; value: string; validAfter: string; validBefore: string; nonce: Hex };
    };
    expect(Object.keys(payload).sort()).toEqual(['authorization', 'signature']);
    const { authorization } = payload;
    expect(authorization).toMatchObject({ from: SERVICE, to: PAY_TO, value: '12345' });
    // Our window (120 s) is shorter than the offer's 300 s; `accepted` still says 300.
    expect(BigInt(authorization.validBefore)).toBe(NOW_SECONDS + 120n);
    expect(payment.expiresAt).toEqual({ unixSeconds: NOW_SECONDS + 120n });
    expect(
      await verifyTypedData({
        address: SERVICE,
        domain: { name: 'USDC', version: '2', chainId: 84532, verifyingContract: USDC_BASE_SEPOLIA },
        types: transferWithAuthorizationTypes,
        primaryType: 'TransferWithAuthorization',
        message: {
          from: authorization.from,
          to: authorization.to,
          value: BigInt(authorization.value),
          validAfter: BigInt(authorization.validAfter),
          validBefore: BigInt(authorization.validBefore),
          nonce: authorization.nonce,
        },
        signature: payload.signature,
      }),
    ).toBe(true);

    // @x402/core's resource server accepts a payment only when `accepted` deep-equals one of its offers.
    const server = new x402ResourceServer();
    const offers = offered.accepts as Parameters<typeof server.findMatchingRequirements>[0];
    expect(server.findMatchingRequirements(offers, decoded)).toStrictEqual(evmEntry);
  });

  it('is sent as PAYMENT-SIGNATURE, never as X-PAYMENT; a version 1 payment the other way round', async () => {
    const v2 = await payFor(response(402, { 'payment-required': header(required([evmEntry])) }));
    const call = {
      api_url: resource.url,
      method: 'GET',
      headers: { 'X-Payment': 'theirs', 'Payment-Signature': 'theirs' },
    };
    const built = buildTargetRequest(call, { paymentHeader: v2.header, paymentVersion: v2.x402Version });
    expect(built.ok && built.value.headers['payment-signature']).toBe(v2.header);
    expect(built.ok && built.value.headers['x-payment']).toBeUndefined();

    const v1 = await payFor(response(402, {}, v1Body));
    expect(v1.x402Version).toBe(1);
    expect(decodePaymentHeader(v1.header, PAYMENT_SCHEMES)).toMatchObject({
      ok: true,
      value: { x402Version: 1, network: 'base-sepolia' },
    });
    const builtV1 = buildTargetRequest(call, { paymentHeader: v1.header, paymentVersion: v1.x402Version });
    expect(builtV1.ok && builtV1.value.headers['x-payment']).toBe(v1.header);
    expect(builtV1.ok && builtV1.value.headers['payment-signature']).toBeUndefined();
  });

  it("never forwards a caller's PAYMENT-SIGNATURE or X-PAYMENT", () => {
    const built = buildTargetRequest({
      api_url: resource.url,
      method: 'GET',
      headers: { 'PAYMENT-SIGNATURE': 'theirs', 'x-payment': 'theirs', 'x-other': 'kept' },
    });
    expect(built.ok && built.value.headers).toEqual({ 'x-other': 'kept', 'accept-encoding': 'identity' });
  });
});

describe("a target's x402 response headers", () => {
  const receipt = (transaction: string, network = 'eip155:84532') =>
    header({ success: true, transaction, network, payer: SERVICE });

  it('reads the settlement from PAYMENT-RESPONSE (version 2) as well as X-PAYMENT-RESPONSE (version 1)', () => {
    expect(reportedSettlement({ headers: { 'payment-response': receipt('0xv2') } })).toBe('0xv2');
    expect(reportedSettlement({ headers: { 'x-payment-response': receipt('0xv1', 'base-sepolia') } })).toBe('0xv1');
    expect(
      reportedSettlement({ headers: { 'payment-response': 'garbage', 'x-payment-response': receipt('0xv1') } }),
    ).toBe('0xv1');
    expect(
      reportedSettlement({
        headers: { 'payment-response': header({ success: false, transaction: '', network: 'eip155:84532' }) },
      }),
    ).toBeUndefined();
  });

  it('never reach our client: PAYMENT-REQUIRED, PAYMENT-RESPONSE and X-PAYMENT-RESPONSE are dropped', () => {
    expect([...OUTBOUND_RESPONSE_HEADERS]).toEqual([...V2_RESPONSE_HEADERS]);
    expect(
      safeResponseHeaders({
        'content-type': 'application/json',
        'PAYMENT-REQUIRED': 'e30=',
        'payment-response': 'e30=',
        'X-Payment-Response': 'e30=',
        'x-other': 'kept',
      }),
    ).toEqual({ 'content-type': 'application/json', 'x-other': 'kept' });
  });
});
