// A client's upto payment as we read it (payments/chains/evm/uptoIncoming/): the payload and the
// PAYMENT-SIGNATURE are untrusted and checked field by field (a malformed one is refused with the
// field it names, never thrown on); the permit's digest is viem's hashTypedData of @x402/evm's
// upto witness types under Permit2's domain, and recovers the signer of signTypedData; the settle
// call is what the proxy's ABI encodes; the replay identity is the payer and its Permit2 nonce.
import { randomBytes } from 'node:crypto';
import { encodeFunctionData, hashTypedData, toHex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { describe, expect, it } from 'vitest';
import { permit2Artifact } from '../../contracts/Permit2.artifact';
import { PERMIT2_ADDRESS } from '../../payments/chains/evm/permit2';
import { uptoPermit2WitnessTypes, uptoPermitDigestBytes } from '../../payments/chains/evm/uptoIncoming/digest';
import {
  checkUptoPayload,
  checkUptoPaymentSignature,
  UPTO_PERMIT2_PROXY_ADDRESS,
  uptoPermitOf,
  uptoReplayIdentity,
  type UptoPermit,
} from '../../payments/chains/evm/uptoIncoming/payload';
import { uptoSettleData } from '../../payments/chains/evm/uptoIncoming/settleData';
import { recoverSignerLowercase } from '../../payments/basics/secp256k1';
import { randomAddress, randomWord } from '../support/random-authorization';

const MAX_UINT256 = (1n << 256n) - 1n;

function validPayload() {
  return {
    signature: `0x${'ab'.repeat(65)}`,
    permit2Authorization: {
      from: '0x1111111111111111111111111111111111111111',
      permitted: { token: '0x2222222222222222222222222222222222222222', amount: '50000' },
      spender: UPTO_PERMIT2_PROXY_ADDRESS,
      nonce: MAX_UINT256.toString(),
      deadline: '1900000000',
      witness: {
        to: '0x3333333333333333333333333333333333333333',
        facilitator: '0x3333333333333333333333333333333333333333',
        validAfter: '0',
      },
    },
  };
}

function validSignature() {
  return {
    x402Version: 2,
    resource: { url: 'http://127.0.0.1/relay' },
    accepted: {
      scheme: 'upto',
      network: 'eip155:80002',
      amount: '50000',
      asset: '0x41E94Eb019C0762f9Bfcf9Fb1E58725BfB0e7582',
      payTo: '0x3333333333333333333333333333333333333333',
      maxTimeoutSeconds: 300,
      extra: { assetTransferMethod: 'permit2', facilitatorAddress: '0x3333333333333333333333333333333333333333' },
    },
    payload: validPayload(),
  };
}

type Json = Record<string, unknown>;

/** The valid payload with one change at `path` (undefined deletes the field). */
function payloadWith(path: string, value: unknown): Json {
  const payload = validPayload() as unknown as Json;
  const keys = path.split('.');
  let node = payload;
  for (const key of keys.slice(0, -1)) node = node[key] as Json;
  const last = keys.at(-1)!;
  if (value === undefined) Reflect.deleteProperty(node, last);
  else node[last] = value;
  return payload;
}

describe('checkUptoPayload', () => {
  it('keeps the fields of a well-formed payload, and only those', () => {
    const payload = {
      ...validPayload(),
      extra: 'ignored',
      permit2Authorization: { ...validPayload().permit2Authorization, more: 1 },
    };
    expect(checkUptoPayload(payload)).toEqual({ ok: true, value: validPayload() });
  });

  it.each([
    ['not an object', null, 'not a JSON object'],
    ['an array', [], 'not a JSON object'],
    ['a string', 'payload', 'not a JSON object'],
  ])('refuses a payload that is %s', (_, payload, said) => {
    const result = checkUptoPayload(payload);
    expect(result).toMatchObject({ ok: false, reason: 'invalid_payload' });
    expect(!result.ok && result.details).toContain(said);
  });

  it.each<[string, unknown, string]>([
    ['signature', undefined, 'signature'],
    ['signature', 12, 'signature'],
    ['signature', '0x', 'signature'],
    ['signature', '0xabc', 'signature'],
    ['signature', `0x${'zz'.repeat(65)}`, 'signature'],
    ['signature', `0x${'ab'.repeat(2049)}`, 'signature'],
    ['permit2Authorization', undefined, 'permit2Authorization'],
    ['permit2Authorization', 'x', 'permit2Authorization'],
    ['permit2Authorization.permitted', undefined, 'permitted'],
    ['permit2Authorization.witness', undefined, 'witness'],
    ['permit2Authorization.witness', [], 'witness'],
    ['permit2Authorization.from', undefined, 'from'],
    ['permit2Authorization.from', '0x1234', 'from'],
    ['permit2Authorization.from', '1'.repeat(40), 'from'],
    ['permit2Authorization.spender', `0x${'g'.repeat(40)}`, 'spender'],
    ['permit2Authorization.permitted.token', 7, 'permitted.token'],
    ['permit2Authorization.witness.to', '0x', 'witness.to'],
    // An exact Permit2 payload (no facilitator in the witness) is not an upto one.
    ['permit2Authorization.witness.facilitator', undefined, 'witness.facilitator'],
    ['permit2Authorization.permitted.amount', 50000, 'permitted.amount'],
    ['permit2Authorization.permitted.amount', '-1', 'permitted.amount'],
    ['permit2Authorization.permitted.amount', '1.5', 'permitted.amount'],
    ['permit2Authorization.permitted.amount', '0x10', 'permitted.amount'],
    ['permit2Authorization.permitted.amount', '007', 'permitted.amount'],
    ['permit2Authorization.permitted.amount', '', 'permitted.amount'],
    ['permit2Authorization.nonce', (MAX_UINT256 + 1n).toString(), 'nonce'],
    ['permit2Authorization.nonce', undefined, 'nonce'],
    ['permit2Authorization.deadline', '1e9', 'deadline'],
    ['permit2Authorization.witness.validAfter', null, 'witness.validAfter'],
  ])('refuses %s = %j, naming it', (path, value, said) => {
    const result = checkUptoPayload(payloadWith(path, value));
    expect(result).toMatchObject({ ok: false, reason: 'invalid_payload' });
    expect(!result.ok && result.details).toContain(said);
  });
});

describe('checkUptoPaymentSignature', () => {
  it('reads a well-formed PAYMENT-SIGNATURE paying upto', () => {
    expect(checkUptoPaymentSignature(validSignature())).toEqual({ ok: true, value: validSignature() });
  });

  it.each<[string, (value: Json) => void, string]>([
    ['x402Version 1', (value) => (value.x402Version = 1), 'unsupported_x402_version'],
    ['no accepted', (value) => delete value.accepted, 'invalid_payload'],
    ['the exact scheme', (value) => ((value.accepted as Json).scheme = 'exact'), 'unsupported_scheme'],
    ['an unknown network', (value) => ((value.accepted as Json).network = 'eip155:61'), 'unknown_network'],
    ['a Solana network', (value) => ((value.accepted as Json).network = 'solana-devnet'), 'unknown_network'],
    ['no network', (value) => delete (value.accepted as Json).network, 'unknown_network'],
    ['an asset that is no address', (value) => ((value.accepted as Json).asset = 'USDC'), 'invalid_payload'],
    ['a payTo that is no address', (value) => ((value.accepted as Json).payTo = 42), 'invalid_payload'],
    ['an amount as a number', (value) => ((value.accepted as Json).amount = 50000), 'invalid_payload'],
    ['a timeout of 0', (value) => ((value.accepted as Json).maxTimeoutSeconds = 0), 'invalid_payload'],
    ['a fractional timeout', (value) => ((value.accepted as Json).maxTimeoutSeconds = 1.5), 'invalid_payload'],
    ['no extra', (value) => delete (value.accepted as Json).extra, 'invalid_payload'],
    ['a resource without url', (value) => (value.resource = { description: 'x' }), 'invalid_payload'],
    ['extensions that are a list', (value) => (value.extensions = ['x']), 'invalid_payload'],
    ['a malformed payload', (value) => ((value.payload as Json).signature = 'none'), 'invalid_payload'],
    ['no payload', (value) => delete value.payload, 'invalid_payload'],
  ])('refuses %s', (_, change, reason) => {
    const value = validSignature() as unknown as Json;
    change(value);
    expect(checkUptoPaymentSignature(value)).toMatchObject({ ok: false, reason });
  });

  it('refuses what is not an object', () => {
    for (const value of [null, 'x', 3, []])
      expect(checkUptoPaymentSignature(value)).toMatchObject({ ok: false, reason: 'invalid_payload' });
  });
});

function randomPermit(): UptoPermit {
  return {
    from: randomAddress(),
    token: randomAddress(),
    maximum: randomWord(1 + (randomBytes(1)[0]! % 32)),
    spender: randomAddress(),
    nonce: randomWord(32),
    deadline: randomWord(8),
    to: randomAddress(),
    facilitator: randomAddress(),
    validAfter: randomWord(4),
    signature: '0x',
  };
}

function typedData(chainId: number, permit: UptoPermit) {
  return {
    domain: { name: 'Permit2', chainId, verifyingContract: PERMIT2_ADDRESS },
    types: uptoPermit2WitnessTypes,
    primaryType: 'PermitWitnessTransferFrom' as const,
    message: {
      permitted: { token: permit.token, amount: permit.maximum },
      spender: permit.spender,
      nonce: permit.nonce,
      deadline: permit.deadline,
      witness: { to: permit.to, facilitator: permit.facilitator, validAfter: permit.validAfter },
    },
  };
}

describe('the digest of an upto permit', () => {
  it('is hashTypedData of @x402/evm’s upto witness types under Permit2’s domain, over 200 random permits', () => {
    for (let index = 0; index < 200; index += 1) {
      const chainId = [80002, 4326, 84532, 1][index % 4]!;
      const permit = randomPermit();
      expect(toHex(uptoPermitDigestBytes(chainId, permit))).toBe(hashTypedData(typedData(chainId, permit)));
    }
  });

  it('recovers the signer of signTypedData', async () => {
    const account = privateKeyToAccount(toHex(randomBytes(32)));
    const permit = { ...randomPermit(), from: account.address };
    const signature = await account.signTypedData(typedData(80002, permit));
    expect(recoverSignerLowercase(uptoPermitDigestBytes(80002, permit), signature)).toBe(account.address.toLowerCase());
    expect(recoverSignerLowercase(uptoPermitDigestBytes(4326, permit), signature)).not.toBe(
      account.address.toLowerCase(),
    );
  });
});

describe('the settle call and the replay identity', () => {
  it('settle(permit, amount, owner, witness, signature) is the proxy ABI’s encoding', () => {
    for (let index = 0; index < 20; index += 1) {
      const permit = { ...randomPermit(), signature: toHex(randomBytes(65)) };
      const amount = permit.maximum / 3n;
      expect(uptoSettleData(permit, amount)).toBe(
        encodeFunctionData({
          abi: permit2Artifact.uptoProxy.abi,
          functionName: 'settle',
          args: [
            {
              permitted: { token: permit.token, amount: permit.maximum },
              nonce: permit.nonce,
              deadline: permit.deadline,
            },
            amount,
            permit.from,
            { to: permit.to, facilitator: permit.facilitator, validAfter: permit.validAfter },
            permit.signature,
          ],
        }),
      );
    }
  });

  it('names a payment by its payer (lowercase) and Permit2 nonce (32 bytes of hex)', () => {
    const payload = validPayload();
    const mixedCase = {
      ...payload,
      permit2Authorization: { ...payload.permit2Authorization, from: `0x${'aB'.repeat(20)}`, nonce: '255' },
    };
    expect(uptoReplayIdentity(mixedCase)).toEqual({
      payer: `0x${'ab'.repeat(20)}`,
      payment: `permit2:0x${'ab'.repeat(20)}:0x${'0'.repeat(62)}ff`,
    });
    expect(uptoReplayIdentity(payload).payment).toBe(
      `permit2:0x1111111111111111111111111111111111111111:0x${'f'.repeat(64)}`,
    );
    expect(uptoPermitOf(payload).nonce).toBe(MAX_UINT256);
  });
});
