import { getAddress } from 'viem';
import type { Handler } from './types';
import { nextUtcMidnight, utcDay } from '../payments/basics/clock';
import { relayFeeModelText } from '../payments/accounts/fees';
import { spentOn, SYSTEM_SCOPE_ID } from '../payments/accounts/limits';
import { usdToMicro } from '../payments/basics/money';
import { errorReply } from './errors';
import { volumeView } from './getLimits';

const EVM_ADDRESS = /^0x[0-9a-fA-F]{40}$/;
/**
 * What this operation accepts as an address, also the pattern of the document's WalletAddress: an
 * EVM address or 32 to 44 base58 characters. A base58 string of that length that does not decode
 * to a 32-byte key is no wallet that ever paid, so it is answered with zero use rather than a 400
 * the document could not state.
 */
export const WALLET_ADDRESS = /^(0x[0-9a-fA-F]{40}|[1-9A-HJ-NP-Za-km-z]{32,44})$/;

/** The key the relay counts a paying wallet under: EVM addresses checksummed, Solana addresses as they are. */
function walletKey(address: string): string | undefined {
  if (!WALLET_ADDRESS.test(address)) return undefined;
  return EVM_ADDRESS.test(address) ? getAddress(address.toLowerCase()) : address;
}

export const getRelayLimits: Handler<'getRelayLimits'> = async (ctx, { db, config, clock }) => {
  const wallet = walletKey(ctx.params.address);
  if (wallet === undefined) {
    return errorReply('validation_failed', 'address: not an EVM (0x + 40 hex digits) or Solana (base58) address');
  }
  const now = clock.now();
  const day = utcDay(now);
  const walletLimitMicro = usdToMicro(config.relayDailyPerWalletUsd);
  const systemLimitMicro = usdToMicro(config.relayDailyTotalUsd);
  const classLimits = async (networkClass: 'mainnet' | 'testnet') => {
    const [walletSpent, systemSpent] = await Promise.all([
      spentOn(db, { scope: 'relay_wallet', scopeId: wallet, networkClass, day }),
      spentOn(db, { scope: 'relay_system', scopeId: SYSTEM_SCOPE_ID, networkClass, day }),
    ]);
    return {
      wallet_limits: volumeView({ limitMicro: walletLimitMicro, spentMicro: walletSpent }),
      system_limits: volumeView({ limitMicro: systemLimitMicro, spentMicro: systemSpent }),
      can_relay: walletSpent < walletLimitMicro && systemSpent < systemLimitMicro,
    };
  };
  const [mainnet, testnet] = await Promise.all([classLimits('mainnet'), classLimits('testnet')]);
  return {
    status: 200,
    body: {
      wallet_address: ctx.params.address,
      mainnet,
      testnet,
      relay_fee_model: relayFeeModelText({ percent: config.relayFeePercent, minUsdc: config.relayFeeMinUsdc }),
      reset_time: nextUtcMidnight(now).toISOString(),
    },
  };
};
