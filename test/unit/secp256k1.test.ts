// The three secp256k1 implementations (native binding, WebAssembly, noble) are one function: on
// thousands of random keys and digests each signs to the same bytes as viem's `sign`, and each
// recovers the signer viem's recoverAddress finds, also for signatures it did not make itself.
import { randomBytes } from 'node:crypto';
import { bytesToHex, type Hex } from 'viem';
import { privateKeyToAccount, sign } from 'viem/accounts';
import { serviceAccount } from '../../payments/chains/evm/account';
import { recoverAddress } from 'viem';
import { describe, expect, it } from 'vitest';
import {
  chooseSecp256k1,
  recoverSigner,
  SECP256K1_IMPLEMENTATIONS,
  signDigest,
  type Secp256k1,
} from '../../payments/basics/secp256k1';

const VECTORS = 2_000;

function randomKey(): Hex {
  // Any 32 bytes below the group order: all but a 2^-128 share of random ones.
  return bytesToHex(randomBytes(32));
}

const implementations: Secp256k1[] = SECP256K1_IMPLEMENTATIONS.map((name) => chooseSecp256k1(name).implementation);

describe('secp256k1', () => {
  it('loads all three here, and the default is the native binding', () => {
    expect(implementations.map((implementation) => implementation.name)).toEqual(['native', 'wasm', 'noble']);
    expect(chooseSecp256k1().implementation.name).toBe('native');
  });

  it(`signs ${VECTORS} random digests to the same bytes in every implementation, as viem does`, async () => {
    for (let index = 0; index < VECTORS; index += 1) {
      const key = randomKey();
      const digest = bytesToHex(randomBytes(32));
      const signatures = implementations.map((implementation) => signDigest(key, digest, implementation));
      expect(new Set(signatures).size).toBe(1);
      if (index % 20 === 0) expect(signatures[0]).toBe(await sign({ hash: digest, privateKey: key, to: 'hex' }));
    }
  });

  it(`recovers the signer of ${VECTORS} random signatures in every implementation, as viem does`, async () => {
    for (let index = 0; index < VECTORS; index += 1) {
      const key = randomKey();
      const digest = bytesToHex(randomBytes(32));
      const signature = await sign({ hash: digest, privateKey: key, to: 'hex' });
      const address = privateKeyToAccount(key).address;
      for (const implementation of implementations)
        expect(recoverSigner(digest, signature, implementation)).toBe(address);
      if (index % 20 === 0) expect(await recoverAddress({ hash: digest, signature })).toBe(address);
    }
  });

  it('recovers nothing, in every implementation, from a signature that recovers no key', () => {
    const digest = bytesToHex(randomBytes(32));
    // r = 0 is no point; a v of 29 is no Ethereum recovery id; a short signature is malformed, and
    // so is one of the right length that is not hex.
    const zeroR: Hex = `0x${'00'.repeat(32)}${'11'.repeat(32)}1b`;
    const badV: Hex = `0x${'11'.repeat(64)}1d`;
    const short: Hex = `0x${'11'.repeat(64)}`;
    const notHex: Hex = `0x${'11'.repeat(40)}zz${'11'.repeat(23)}1b`;
    for (const implementation of implementations)
      for (const signature of [zeroR, badV, short, notHex])
        expect(recoverSigner(digest, signature, implementation)).toBeUndefined();
  });

  it("signs our transactions, messages and typed data as viem's own account does", async () => {
    for (let index = 0; index < 50; index += 1) {
      const key = randomKey();
      const ours = serviceAccount(key);
      const viems = privateKeyToAccount(key);
      const transaction = {
        chainId: 84532,
        nonce: index,
        to: privateKeyToAccount(randomKey()).address,
        value: BigInt(index) * 10n ** 15n,
        data: bytesToHex(randomBytes(68)),
        gas: 90_000n,
        maxFeePerGas: 2_000_000_000n,
        maxPriorityFeePerGas: 1_000_000n,
      } as const;
      expect(ours.address).toBe(viems.address);
      expect(await ours.signTransaction(transaction)).toBe(await viems.signTransaction(transaction));
      expect(await ours.signMessage({ message: `hello ${index}` })).toBe(
        await viems.signMessage({ message: `hello ${index}` }),
      );
      const typedData = {
        domain: { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: transaction.to },
        types: { Ping: [{ name: 'count', type: 'uint256' }] },
        primaryType: 'Ping',
        message: { count: BigInt(index) },
      } as const;
      expect(await ours.signTypedData(typedData)).toBe(await viems.signTypedData(typedData));
    }
  });

  it('refuses to be forced onto an implementation that does not load, naming it', () => {
    expect(() => chooseSecp256k1('nope' as never)).toThrow(/nope/);
  });
});
