// The harness's keys: the wallets tests and the sandbox see (service, client, target), and the
// ones only the peers use (the USDC minter on EVM, the two facilitators on both kinds of chain, the
// mint authority on Solana).
import type { Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { generateSolanaKey, solanaKeyFromSecret, type SolanaKey } from '../svm/keys.js';
import type { EvmWallet, PeerWallets, StartPeersOptions } from './types.js';

export interface PeerKeys {
  wallets: PeerWallets;
  /** Deploys USDC and mints it on every EVM chain. */
  minter: EvmWallet;
  /** Sends the facilitator's EVM settlements. */
  facilitatorEvm: EvmWallet;
  /** Sends the v2 facilitator's EVM settlements. */
  facilitatorV2Evm: EvmWallet;
  /** The facilitator's Solana fee payer. */
  feePayer: SolanaKey;
  /** The v2 facilitator's Solana fee payer. */
  feePayerV2: SolanaKey;
  mintAuthority: SolanaKey;
}

export function evmWallet(privateKey: Hex = generatePrivateKey()): EvmWallet {
  const account = privateKeyToAccount(privateKey);
  return { privateKey, address: account.address, account };
}

export async function createPeerKeys(keys: StartPeersOptions['keys']): Promise<PeerKeys> {
  const solanaKey = (secret?: Uint8Array) => (secret ? solanaKeyFromSecret(secret) : generateSolanaKey());
  const [serviceSolana, clientSolana, targetSolana, feePayer, feePayerV2, mintAuthority] = await Promise.all([
    solanaKey(keys?.serviceSolanaSecretKey),
    solanaKey(keys?.clientSolanaSecretKey),
    generateSolanaKey(),
    generateSolanaKey(),
    generateSolanaKey(),
    generateSolanaKey(),
  ]);
  const wallets: PeerWallets = {
    service: { evm: evmWallet(keys?.serviceEvmPrivateKey), solana: serviceSolana },
    client: { evm: evmWallet(keys?.clientEvmPrivateKey), solana: clientSolana },
    target: { evm: evmWallet(), solana: targetSolana },
  };
  return {
    wallets,
    minter: evmWallet(),
    facilitatorEvm: evmWallet(),
    facilitatorV2Evm: evmWallet(),
    feePayer,
    feePayerV2,
    mintAuthority,
  };
}
