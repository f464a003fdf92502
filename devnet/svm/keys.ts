// Solana keys in the two forms that configuration accepts (SOLANA_PRIVATE_KEY: base58 or a JSON
// byte array of the 64-byte secret key, seed then public key, as solana-keygen writes it).
import { randomBytes } from 'node:crypto';
import {
  createKeyPairSignerFromBytes,
  getAddressEncoder,
  getBase58Decoder,
  createKeyPairSignerFromPrivateKeyBytes,
  type Address,
  type KeyPairSigner,
} from '@solana/kit';

export interface SolanaKey {
  address: Address;
  /** 64 bytes: the 32-byte seed followed by the 32-byte public key. */
  secretKey: Uint8Array;
  secretKeyBase58: string;
  signer: KeyPairSigner;
}

export async function solanaKeyFromSecret(secretKey: Uint8Array): Promise<SolanaKey> {
  const signer = await createKeyPairSignerFromBytes(secretKey);
  return { address: signer.address, secretKey, secretKeyBase58: getBase58Decoder().decode(secretKey), signer };
}

export async function generateSolanaKey(): Promise<SolanaKey> {
  const seed = new Uint8Array(randomBytes(32));
  const { address } = await createKeyPairSignerFromPrivateKeyBytes(seed);
  const secretKey = new Uint8Array(64);
  secretKey.set(seed, 0);
  secretKey.set(getAddressEncoder().encode(address), 32);
  return solanaKeyFromSecret(secretKey);
}
