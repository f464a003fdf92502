/**
 * Our wallet as viem's account, signing through the process's secp256k1 (payments/basics/secp256k1.ts:
 * the native binding where it loads) instead of viem's own JavaScript curve: our authorizations to
 * targets, our transactions (settlements, refunds), and any message or typed data. The signatures
 * are the same bytes viem would make (RFC 6979, low s); only the cost differs.
 */
import {
  hashMessage,
  hashTypedData,
  keccak256,
  parseSignature,
  serializeTransaction,
  type Hex,
  type TransactionSerializable,
} from 'viem';
import { privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import { signDigest } from '../../basics/secp256k1';

export function serviceAccount(privateKey: Hex): PrivateKeyAccount {
  const account = privateKeyToAccount(privateKey);
  const signHash = (hash: Hex): Hex => signDigest(privateKey, hash);
  return {
    ...account,
    sign: ({ hash }) => Promise.resolve(signHash(hash)),
    signMessage: ({ message }) => Promise.resolve(signHash(hashMessage(message))),
    signTypedData: (typedData) => Promise.resolve(signHash(hashTypedData(typedData))),
    signTransaction: async (transaction, { serializer = serializeTransaction } = {}) => {
      // As viem signs: the payload without an EIP-4844 transaction's sidecars.
      const signable: TransactionSerializable =
        transaction.type === 'eip4844' ? { ...transaction, sidecars: false } : transaction;
      const signature = parseSignature(signHash(keccak256(await serializer(signable))));
      return serializer(transaction, signature);
    },
  };
}
