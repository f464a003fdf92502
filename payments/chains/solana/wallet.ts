/** Our Solana wallet: the signer from SOLANA_PRIVATE_KEY. */
import { createKeyPairSignerFromBytes, getBase58Encoder, type KeyPairSigner } from '@solana/kit';
import { ConfigError } from '../../basics/config';

/** SOLANA_PRIVATE_KEY: base58 of the 64-byte secret key, or its JSON byte array (as solana-keygen writes it). */
export function solanaSecretKeyBytes(key: string): Uint8Array {
  const text = key.trim();
  let bytes: Uint8Array;
  if (text.startsWith('[')) {
    let values: unknown;
    try {
      values = JSON.parse(text);
    } catch {
      throw new ConfigError('SOLANA_PRIVATE_KEY', 'not a JSON byte array');
    }
    if (!Array.isArray(values) || !values.every((value) => Number.isInteger(value) && value >= 0 && value <= 255)) {
      throw new ConfigError('SOLANA_PRIVATE_KEY', 'not a JSON byte array');
    }
    bytes = Uint8Array.from(values as number[]);
  } else {
    try {
      bytes = new Uint8Array(getBase58Encoder().encode(text));
    } catch {
      throw new ConfigError('SOLANA_PRIVATE_KEY', 'not base58');
    }
  }
  if (bytes.length !== 64)
    throw new ConfigError('SOLANA_PRIVATE_KEY', `expected a 64-byte secret key, got ${bytes.length} bytes`);
  return bytes;
}

export async function solanaSignerFromKey(key: string): Promise<KeyPairSigner> {
  const bytes = solanaSecretKeyBytes(key);
  try {
    return await createKeyPairSignerFromBytes(bytes);
  } catch {
    throw new ConfigError('SOLANA_PRIVATE_KEY', 'the public key half does not match the private key');
  }
}
