/**
 * secp256k1 signing and public-key recovery for every EVM signature we make or check: a client's
 * EIP-3009 authorization (recovery), our authorizations to targets and our transactions (signing).
 * Three implementations give the same answers, the fastest that loads is chosen once per process:
 *
 *   native   the `secp256k1` package's binding to libsecp256k1, prebuilt inside the package
 *            (prebuilds/), loaded without any install script; about 60 us a recovery here
 *   wasm     `tiny-secp256k1`, libsecp256k1 compiled to WebAssembly; about 270 us
 *   noble    `@noble/curves`, viem's own curve, in JavaScript; about 1,700 us
 *
 * Signatures are RFC 6979 deterministic with a low s in all three, so each signs a digest with a
 * key to the very same bytes. SECP256K1_IMPLEMENTATION (native, wasm or noble) forces one, for
 * tests and for an operator who distrusts a binding; a forced one that does not load stops the
 * start. Where nothing was chosen at start (a test of a domain function), the first use chooses.
 */
import { createRequire } from 'node:module';
import { secp256k1 as noble } from '@noble/curves/secp256k1';
import { bytesToHex, getAddress, hexToBytes, keccak256, type Hex } from 'viem';

export const SECP256K1_IMPLEMENTATIONS = ['native', 'wasm', 'noble'] as const;
export type Secp256k1Name = (typeof SECP256K1_IMPLEMENTATIONS)[number];

export type RecoveryId = 0 | 1;

export interface Secp256k1 {
  readonly name: Secp256k1Name;
  /**
   * The uncompressed public key (65 bytes, 0x04 first) whose private key signed the 32-byte
   * `digest` with the 64-byte `signature` (r and s) and recovery id; undefined when there is none.
   */
  recover(digest: Uint8Array, signature: Uint8Array, recoveryId: RecoveryId): Uint8Array | undefined;
  /** A signature of the 32-byte `digest`: 64 bytes (r and s, low s) and its recovery id. */
  sign(digest: Uint8Array, privateKey: Uint8Array): { signature: Uint8Array; recoveryId: RecoveryId };
}

/** What the `secp256k1` package's binding exports (it ships no types). */
interface NativeBinding {
  ecdsaRecover(signature: Uint8Array, recid: number, message: Uint8Array, compressed: boolean): Uint8Array;
  ecdsaSign(message: Uint8Array, privateKey: Uint8Array): { signature: Uint8Array; recid: number };
}

interface WasmModule {
  recover(hash: Uint8Array, signature: Uint8Array, recoveryId: 0 | 1 | 2 | 3, compressed?: boolean): Uint8Array | null;
  signRecoverable(hash: Uint8Array, privateKey: Uint8Array): { signature: Uint8Array; recoveryId: 0 | 1 | 2 | 3 };
}

const require = createRequire(import.meta.url);

function recoveryIdOf(value: number): RecoveryId {
  // An Ethereum signature's point has an x below the group order: the recovery id is 0 or 1.
  if (value !== 0 && value !== 1) throw new Error(`unexpected recovery id ${value}`);
  return value;
}

function nativeSecp256k1(): Secp256k1 {
  // `secp256k1/bindings` is the binding alone; the package's main file would fall back to elliptic.
  const binding = require('secp256k1/bindings') as NativeBinding;
  return {
    name: 'native',
    recover(digest, signature, recoveryId) {
      try {
        return binding.ecdsaRecover(signature, recoveryId, digest, false);
      } catch {
        return undefined;
      }
    },
    sign(digest, privateKey) {
      const { signature, recid } = binding.ecdsaSign(digest, privateKey);
      return { signature, recoveryId: recoveryIdOf(recid) };
    },
  };
}

function wasmSecp256k1(): Secp256k1 {
  const wasm = require('tiny-secp256k1') as WasmModule;
  return {
    name: 'wasm',
    recover(digest, signature, recoveryId) {
      try {
        return wasm.recover(digest, signature, recoveryId, false) ?? undefined;
      } catch {
        return undefined;
      }
    },
    sign(digest, privateKey) {
      const { signature, recoveryId } = wasm.signRecoverable(digest, privateKey);
      return { signature, recoveryId: recoveryIdOf(recoveryId) };
    },
  };
}

function nobleSecp256k1(): Secp256k1 {
  return {
    name: 'noble',
    recover(digest, signature, recoveryId) {
      try {
        return noble.Signature.fromCompact(signature)
          .addRecoveryBit(recoveryId)
          .recoverPublicKey(digest)
          .toRawBytes(false);
      } catch {
        return undefined;
      }
    },
    sign(digest, privateKey) {
      const signed = noble.sign(digest, privateKey, { lowS: true });
      return { signature: signed.toCompactRawBytes(), recoveryId: recoveryIdOf(signed.recovery) };
    },
  };
}

const LOADERS: Record<Secp256k1Name, () => Secp256k1> = {
  native: nativeSecp256k1,
  wasm: wasmSecp256k1,
  noble: nobleSecp256k1,
};

/** A fixed vector every implementation must answer right before it is chosen. */
const CHECK_KEY = new Uint8Array(32).fill(7);
const CHECK_DIGEST = new Uint8Array(32).fill(9);

function loads(name: Secp256k1Name): { ok: true; implementation: Secp256k1 } | { ok: false; why: string } {
  try {
    const implementation = LOADERS[name]();
    const reference = nobleSecp256k1();
    const { signature, recoveryId } = implementation.sign(CHECK_DIGEST, CHECK_KEY);
    const expected = reference.sign(CHECK_DIGEST, CHECK_KEY);
    const recovered = implementation.recover(CHECK_DIGEST, signature, recoveryId);
    const publicKey = reference.recover(CHECK_DIGEST, expected.signature, expected.recoveryId);
    const same = (a: Uint8Array | undefined, b: Uint8Array | undefined) =>
      a !== undefined && b !== undefined && Buffer.from(a).equals(Buffer.from(b));
    if (!same(signature, expected.signature) || recoveryId !== expected.recoveryId || !same(recovered, publicKey))
      return { ok: false, why: 'it answers a known vector wrongly' };
    return { ok: true, implementation };
  } catch (error) {
    return { ok: false, why: error instanceof Error ? (error.message.split('\n')[0] ?? 'failed') : String(error) };
  }
}

export interface Secp256k1Choice {
  implementation: Secp256k1;
  /** Why each faster implementation was passed over. */
  passedOver: { name: Secp256k1Name; why: string }[];
}

/**
 * The fastest implementation that loads and answers a known vector right, or the one `forced`
 * names (which then must load).
 */
export function chooseSecp256k1(forced?: Secp256k1Name): Secp256k1Choice {
  if (forced !== undefined) {
    const loaded = loads(forced);
    if (!loaded.ok) throw new Error(`secp256k1 implementation ${forced} does not load: ${loaded.why}`);
    return { implementation: loaded.implementation, passedOver: [] };
  }
  const passedOver: { name: Secp256k1Name; why: string }[] = [];
  for (const name of SECP256K1_IMPLEMENTATIONS) {
    const loaded = loads(name);
    if (loaded.ok) return { implementation: loaded.implementation, passedOver };
    passedOver.push({ name, why: loaded.why });
  }
  // noble is plain JavaScript: it cannot fail to load where this module loaded.
  return { implementation: nobleSecp256k1(), passedOver };
}

/** One implementation for the whole process: chosen at start (selectSecp256k1), else at its first use. */
let chosen: Secp256k1Choice | undefined;

export function processSecp256k1(): Secp256k1Choice {
  chosen ??= chooseSecp256k1();
  return chosen;
}

/** Chooses the process's implementation at start (SECP256K1_IMPLEMENTATION forces one) and answers the choice. */
export function selectSecp256k1(forced?: Secp256k1Name): Secp256k1Choice {
  chosen = chooseSecp256k1(forced);
  return chosen;
}

/**
 * The address (lowercase hex) that signed a 32-byte digest with a 65-byte Ethereum signature (r, s,
 * and v as 27 or 28, or 0 or 1); undefined when the signature is not 65 bytes of hex or recovers no
 * key. No checksum is computed: comparing it with another address needs none.
 */
export function recoverSignerLowercase(
  digest: Uint8Array,
  signature: Hex,
  secp: Secp256k1 = processSecp256k1().implementation,
): Hex | undefined {
  if (signature.length !== 132 || digest.length !== 32) return undefined;
  // Hex that is not hex stops the decoding short, which the length then refuses.
  const bytes = Buffer.from(signature.slice(2), 'hex');
  const v = bytes[64];
  if (bytes.length !== 65 || v === undefined) return undefined;
  const recoveryId = v >= 27 ? v - 27 : v;
  if (recoveryId !== 0 && recoveryId !== 1) return undefined;
  const publicKey = secp.recover(digest, bytes.subarray(0, 64), recoveryId);
  if (publicKey === undefined) return undefined;
  const hash = keccak256(publicKey.subarray(1), 'bytes');
  return `0x${Buffer.from(hash.buffer, hash.byteOffset + 12, 20).toString('hex')}`;
}

/**
 * The address (checksummed) that signed a 32-byte digest with a 65-byte Ethereum signature (r, s,
 * and v as 27 or 28, or 0 or 1); undefined when the signature recovers no key.
 */
export function recoverSigner(digest: Hex, signature: Hex, secp: Secp256k1 = processSecp256k1().implementation) {
  const recovered = recoverSignerLowercase(hexToBytes(digest), signature, secp);
  return recovered === undefined ? undefined : getAddress(recovered);
}

/** The 65-byte Ethereum signature (r, s, v as 27 or 28) of a 32-byte digest, as viem's `sign` makes it. */
export function signDigest(privateKey: Hex, digest: Hex, secp: Secp256k1 = processSecp256k1().implementation): Hex {
  const { signature, recoveryId } = secp.sign(hexToBytes(digest), hexToBytes(privateKey));
  return `${bytesToHex(signature)}${recoveryId === 0 ? '1b' : '1c'}`;
}
