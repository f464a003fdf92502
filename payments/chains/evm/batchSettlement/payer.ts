/**
 * x402 `batch-settlement` on EVM, the payer's side (specification scheme_batch_settlement_evm.md):
 * our channel config for a target's offer, its id, the deposit payload (an ERC-3009
 * ReceiveWithAuthorization to the deposit collector, with the first voucher), a voucher payload
 * (an EIP-712 Voucher: the channel id and a cumulative ceiling), the channel as the contract holds
 * it, and the check of a corrective 402. The deposit payloads are @x402/evm's client code (the
 * same bytes as the unmodified client sends), with our wallet as its signer; a voucher alone is
 * signed over its digest computed directly (./voucher.ts), the same bytes again; what is signed,
 * when, and on which base is decided by payments/outgoing/channels.ts, which records every voucher
 * before it leaves.
 */
import { toClientEvmSigner, type ClientEvmSigner } from '@x402/evm';
import {
  computeChannelId,
  createBatchSettlementEIP3009DepositPayload,
  processCorrectivePaymentRequired,
  type ClientChannelStorage,
} from '@x402/evm/batch-settlement/client';
import { getAddress, isAddress, toHex, zeroAddress, type Address, type Hex } from 'viem';
import type { PrivateKeyAccount } from 'viem/accounts';
import type { PaymentRequirementsV2 } from '../../../x402/v2';
import type { EvmNetworkClients } from '../clients';
import { signPermit2Deposit, type Permit2DepositAuthorization } from './permit2Deposit';
import { batchSettlementReceiverAbi } from './receiverAbi';
import {
  BATCH_SETTLEMENT_ADDRESS,
  cachedChannelIdOf,
  MAX_WITHDRAW_DELAY_SECONDS,
  MIN_WITHDRAW_DELAY_SECONDS,
  voucherDigest,
  type ChannelConfig,
} from './voucher';

/** A channel's immutable config: its EIP-712 hash under the contract's domain is the channel id. */
export type PayerChannelConfig = ChannelConfig;

/** What an offer's extra must say for us to open a channel to it, or what is wrong with it. */
export function channelTerms(offer: { payTo: string; asset: string; extra?: Record<string, unknown> | undefined }):
  | {
      ok: true;
      receiver: Address;
      receiverAuthorizer: Address;
      token: Address;
      withdrawDelay: number;
      minDeposit?: bigint;
    }
  | { ok: false; reason: 'invalid_pay_to' | 'invalid_channel_terms'; details: string } {
  if (!isAddress(offer.payTo, { strict: false }) || offer.payTo.toLowerCase() === zeroAddress)
    return { ok: false, reason: 'invalid_pay_to', details: `payTo ${offer.payTo} is not an EVM address` };
  const extra = offer.extra ?? {};
  const authorizer = extra.receiverAuthorizer;
  if (
    typeof authorizer !== 'string' ||
    !isAddress(authorizer, { strict: false }) ||
    authorizer.toLowerCase() === zeroAddress
  )
    return {
      ok: false,
      reason: 'invalid_channel_terms',
      details: 'a batch-settlement offer needs extra.receiverAuthorizer, a non-zero EVM address',
    };
  const delay = extra.withdrawDelay;
  if (
    typeof delay !== 'number' ||
    !Number.isInteger(delay) ||
    delay < MIN_WITHDRAW_DELAY_SECONDS ||
    delay > MAX_WITHDRAW_DELAY_SECONDS
  )
    return {
      ok: false,
      reason: 'invalid_channel_terms',
      details: `extra.withdrawDelay must be whole seconds from ${MIN_WITHDRAW_DELAY_SECONDS} to ${MAX_WITHDRAW_DELAY_SECONDS}`,
    };
  if (typeof extra.name !== 'string' || typeof extra.version !== 'string')
    return {
      ok: false,
      reason: 'invalid_channel_terms',
      details: "a batch-settlement offer needs extra.name and extra.version (the token's EIP-712 domain)",
    };
  const announced = extra.minDeposit;
  const minDeposit =
    typeof announced === 'string' && /^(0|[1-9][0-9]{0,37})$/.test(announced) ? BigInt(announced) : undefined;
  return {
    ok: true,
    receiver: getAddress(offer.payTo),
    receiverAuthorizer: getAddress(authorizer),
    token: getAddress(offer.asset),
    withdrawDelay: delay,
    ...(minDeposit === undefined ? {} : { minDeposit }),
  };
}

/** Our config for a channel to these terms: our wallet pays and signs the vouchers (an EOA). */
export function payerChannelConfig(
  payer: Address,
  terms: Pick<PayerChannelConfig, 'receiver' | 'receiverAuthorizer' | 'token' | 'withdrawDelay'>,
  salt: Hex,
): PayerChannelConfig {
  return { payer, payerAuthorizer: payer, ...terms, salt };
}

/** The channel id of a config on a network (its CAIP-2 id), remembered: two keccaks saved per call on the channel. */
export function channelIdOf(config: PayerChannelConfig, caip2: string): Hex {
  const chainId = Number(caip2.split(':')[1]);
  return Number.isSafeInteger(chainId) ? cachedChannelIdOf(config, chainId) : computeChannelId(config, caip2);
}

function signerOf(account: PrivateKeyAccount, clients: EvmNetworkClients): ClientEvmSigner {
  return toClientEvmSigner(account, clients.publicClient);
}

/** A payload of ours on a channel: a deposit carrying its first voucher, or a voucher alone. */
export type ChannelPayload =
  | {
      type: 'deposit';
      channelConfig: PayerChannelConfig;
      voucher: { channelId: Hex; maxClaimableAmount: string; signature: Hex };
      deposit: {
        amount: string;
        authorization: Record<string, unknown> | { permit2Authorization: Permit2DepositAuthorization };
      };
    }
  | {
      type: 'voucher';
      channelConfig: PayerChannelConfig;
      voucher: { channelId: Hex; maxClaimableAmount: string; signature: Hex };
    };

/** How a deposit moves the token: an ERC-3009 authorization, or a Permit2 witness transfer. */
export type DepositMethod = 'eip3009' | 'permit2';

/**
 * Signs our payment on a channel: with `deposit`, an authorization moving it into the channel
 * (valid for the offer's maxTimeoutSeconds: ERC-3009, or Permit2 by `method`) and the voucher;
 * without, the voucher alone.
 */
export async function signChannelPayment(
  account: PrivateKeyAccount,
  clients: EvmNetworkClients,
  offer: PaymentRequirementsV2,
  config: PayerChannelConfig,
  {
    ceiling,
    deposit,
    method = 'eip3009',
    nowSeconds,
  }: { ceiling: bigint; deposit?: bigint; method?: DepositMethod; nowSeconds?: number },
): Promise<ChannelPayload> {
  if (deposit !== undefined && method === 'permit2') {
    const channelId = channelIdOf(config, offer.network);
    const permit2Authorization = await signPermit2Deposit(account, clients.chainId, {
      token: config.token,
      amount: deposit,
      channelId,
      // The deadline counts from our clock, as the ERC-3009 builder's validBefore does.
      nowSeconds: nowSeconds ?? Math.floor(Date.now() / 1000),
      validSeconds: offer.maxTimeoutSeconds,
    });
    const voucher = await signOurVoucher(account, clients.chainId, channelId, ceiling);
    return {
      type: 'deposit',
      channelConfig: config,
      voucher,
      deposit: { amount: deposit.toString(), authorization: { permit2Authorization } },
    };
  }
  if (deposit !== undefined) {
    const signed = await createBatchSettlementEIP3009DepositPayload(
      signerOf(account, clients),
      2,
      offer,
      config,
      deposit.toString(),
      ceiling.toString(),
    );
    return signed.payload as unknown as ChannelPayload;
  }
  const voucher = await signOurVoucher(account, clients.chainId, channelIdOf(config, offer.network), ceiling);
  return { type: 'voucher', channelConfig: config, voucher };
}

/**
 * Our voucher: the EIP-712 Voucher digest computed over its ABI words (./voucher.ts) and signed by
 * our wallet's secp256k1, the same bytes as @x402/evm's signVoucher makes through viem's generic
 * typed-data hashing, without its cost on every call.
 */
async function signOurVoucher(
  account: PrivateKeyAccount,
  chainId: number,
  channelId: Hex,
  ceiling: bigint,
): Promise<ChannelPayload['voucher']> {
  const signature = await account.sign({ hash: toHex(voucherDigest(chainId, channelId, ceiling)) });
  return { channelId, maxClaimableAmount: ceiling.toString(), signature };
}

/** The channel as the contract holds it: its balance and what its receiver has claimed. */
export async function readPayerChannel(
  clients: EvmNetworkClients,
  channelId: Hex,
): Promise<{ balance: bigint; totalClaimed: bigint }> {
  const [balance, totalClaimed] = await clients.publicClient.readContract({
    address: BATCH_SETTLEMENT_ADDRESS,
    abi: batchSettlementReceiverAbi,
    functionName: 'channels',
    args: [channelId],
  });
  return { balance, totalClaimed };
}

/**
 * A corrective 402 of a seller (`invalid_batch_settlement_evm_cumulative_amount_mismatch` or
 * `..._below_claimed`), checked as @x402/evm's client checks it: the seller's charged amount must
 * be covered by a voucher whose signature recovers to our own key (or, with no voucher, the
 * chain's claimed total is taken), and never below what the chain shows claimed. Returns the
 * cumulative charge to sign on from now on, or undefined when the correction is not proven.
 */
export async function checkedCorrection(
  account: PrivateKeyAccount,
  clients: EvmNetworkClients,
  config: PayerChannelConfig,
  paymentRequired: { error?: string; accepts: PaymentRequirementsV2[] } & Record<string, unknown>,
): Promise<{ charged: bigint; signedMax?: bigint; balance?: bigint; totalClaimed?: bigint } | undefined> {
  let adopted:
    | { chargedCumulativeAmount?: string; signedMaxClaimable?: string; balance?: string; totalClaimed?: string }
    | undefined;
  const storage: ClientChannelStorage = {
    get: () => Promise.resolve(undefined),
    set: (_key, value) => {
      adopted = value;
      return Promise.resolve();
    },
    delete: () => Promise.resolve(),
  };
  let proven: boolean;
  try {
    proven = await processCorrectivePaymentRequired(
      { signer: signerOf(account, clients), storage, salt: config.salt, payerAuthorizer: config.payerAuthorizer },
      paymentRequired as never,
    );
  } catch {
    // A signature that does not even parse proves nothing.
    return undefined;
  }
  if (!proven || adopted?.chargedCumulativeAmount === undefined) return undefined;
  return {
    charged: BigInt(adopted.chargedCumulativeAmount),
    ...(adopted.signedMaxClaimable === undefined ? {} : { signedMax: BigInt(adopted.signedMaxClaimable) }),
    ...(adopted.balance === undefined ? {} : { balance: BigInt(adopted.balance) }),
    ...(adopted.totalClaimed === undefined ? {} : { totalClaimed: BigInt(adopted.totalClaimed) }),
  };
}
