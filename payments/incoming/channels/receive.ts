/**
 * Being paid through x402 `batch-settlement` channels (specification scheme_batch_settlement_evm.md):
 * our 402's channel entries, and a client's deposit, voucher or refund taken against our mirror of
 * the channel (./store.ts).
 *
 * A voucher is checked locally: one signature recovery against the channel's payer authorizer, and
 * its cumulative ceiling against our state: it must be what we charged so far plus this request's
 * price (else a corrective 402 with our state and the last voucher we hold), within the channel's
 * balance and above what is claimed, the balance being read again from the chain when our copy is
 * older than CHANNEL_RECEIVER_ONCHAIN_TTL_SECONDS. An EIP-1271 payer's voucher (payer authorizer
 * zero) is checked by the payer contract on chain. A deposit (an ERC-3009 authorization, or on a
 * network whose stablecoin moves by Permit2 a Permit2 witness transfer to the Permit2 deposit
 * collector) is simulated from our wallet, then sent by our wallet (the tokens move into the
 * channel before the request is served), and the channel read back from the chain.
 *
 * The request is then served under the channel's lease (one at a time per channel across instances)
 * and its charge committed only when the caller says the resource answered (commitChannelCharge);
 * otherwise the lease is released and nothing was charged: the same voucher pays the next request.
 */
import { randomUUID } from 'node:crypto';
import type { RawBuilder } from 'kysely';
import { getAddress, type Address, type Hex } from 'viem';
import type { Deps } from '../../deps';
import { caip2Of, canonicalNetwork, NETWORK_TABLE, type NetworkName } from '../../basics/networkTable';
import { microToAsset } from '../../basics/money';
import type { PaymentRequirementsV2 } from '../../x402/v2';
import {
  BATCH_SETTLEMENT_SCHEME,
  cachedChannelIdOf,
  isVoucherSignedBy,
  PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
  ZERO_ADDRESS,
} from '../../chains/evm/batchSettlement/voucher';
import {
  readChannelOnChain,
  receiverClients,
  refundCall,
  sendReceiverCall,
  simulateDeposit,
  depositCall,
  voucherValidOnChain,
  type ChannelDeposit,
  type OnchainChannel,
} from '../../chains/evm/batchSettlement/receiverChain';
import type { EvmNetworkClients } from '../../chains/evm/clients';
import type { Tx } from '../../../db/index';
import { readChannelPayload, type ChannelPayload } from './payload';
import { giveBackSpend, type SpendMove } from '../../accounts/limits';
import {
  chargeUnderLease,
  chargeUnderLeaseParts,
  leaseChargedOf,
  closeLeaseUncharged,
  endLease,
  findChannel,
  insertCharge,
  leaseUnchanged,
  recordReceiverTransaction,
  markReceiverTransaction,
  storeOnchain,
  updateChannel,
  type StoredChannel,
} from './store';

export type ChannelDeps = Pick<Deps, 'db' | 'chains' | 'config' | 'submissions' | 'log' | 'clock'>;

/** The specification's error codes (invalid_batch_settlement_evm_*), as @x402/evm 2.27 names them. */
export const CHANNEL_ERRORS = {
  payloadType: 'invalid_batch_settlement_evm_payload_type',
  channelIdMismatch: 'invalid_batch_settlement_evm_channel_id_mismatch',
  receiverMismatch: 'invalid_batch_settlement_evm_receiver_mismatch',
  receiverAuthorizerMismatch: 'invalid_batch_settlement_evm_receiver_authorizer_mismatch',
  tokenMismatch: 'invalid_batch_settlement_evm_token_mismatch',
  withdrawDelayMismatch: 'invalid_batch_settlement_evm_withdraw_delay_mismatch',
  voucherSignature: 'invalid_batch_settlement_evm_voucher_signature',
  cumulativeMismatch: 'invalid_batch_settlement_evm_cumulative_amount_mismatch',
  cumulativeExceedsBalance: 'invalid_batch_settlement_evm_cumulative_exceeds_balance',
  cumulativeBelowClaimed: 'invalid_batch_settlement_evm_cumulative_below_claimed',
  depositBelowMin: 'invalid_batch_settlement_evm_deposit_below_min_deposit',
  depositSimulation: 'invalid_batch_settlement_evm_deposit_simulation_failed',
  depositTransaction: 'invalid_batch_settlement_evm_deposit_transaction_failed',
  channelBusy: 'invalid_batch_settlement_evm_channel_busy',
  missingChannel: 'invalid_batch_settlement_evm_missing_channel',
  stateUnavailable: 'invalid_batch_settlement_evm_verification_state_unavailable',
  chargeExceedsSigned: 'invalid_batch_settlement_evm_charge_exceeds_signed_cumulative',
  refundNoBalance: 'invalid_batch_settlement_evm_refund_no_balance',
  refundAmountInvalid: 'invalid_batch_settlement_evm_refund_amount_invalid',
  refundTransaction: 'invalid_batch_settlement_evm_refund_transaction_failed',
  permit2InvalidSignature: 'invalid_batch_settlement_evm_permit2_invalid_signature',
  permit2InvalidSpender: 'invalid_batch_settlement_evm_permit2_invalid_spender',
  permit2DeadlineExpired: 'invalid_batch_settlement_evm_permit2_deadline_expired',
} as const;

export type ChannelErrorCode = (typeof CHANNEL_ERRORS)[keyof typeof CHANNEL_ERRORS];

/** The channel's state as the 402's and PAYMENT-RESPONSE's `extra.channelState` carry it. */
export interface ChannelStateExtra {
  channelId: Hex;
  balance: string;
  totalClaimed: string;
  withdrawRequestedAt: number;
  refundNonce: string;
  chargedCumulativeAmount: string;
}

/**
 * A refused payment: the code, in words, and for a corrective 402 our state and the last voucher
 * we hold (the client adopts them only after checking that voucher's signature against its key).
 */
export interface ChannelRefusal {
  code: ChannelErrorCode;
  details: string;
  /** Our failure (a chain we could not read or write): a 5xx rather than a 402. */
  ours?: boolean;
  channelState?: ChannelStateExtra;
  voucherState?: { signedMaxClaimable: string; signature: Hex };
}

const refusal = (code: ChannelErrorCode, details: string, more: Partial<ChannelRefusal> = {}): ChannelRefusal => ({
  code,
  details,
  ...more,
});

export function channelStateOf(channel: StoredChannel): ChannelStateExtra {
  return {
    channelId: channel.channelId,
    balance: channel.balance.toString(),
    totalClaimed: channel.totalClaimed.toString(),
    withdrawRequestedAt: channel.withdrawRequestedAt,
    refundNonce: channel.refundNonce.toString(),
    chargedCumulativeAmount: channel.chargedCumulative.toString(),
  };
}

/**
 * Whether channels are offered on the network: listed in CHANNEL_RECEIVER_NETWORKS, a stablecoin
 * deposited by EIP-3009 or by Permit2, our wallet there.
 */
function receivesChannelsOn(deps: Pick<Deps, 'chains' | 'config'>, network: NetworkName): boolean {
  if (!deps.config.receiverChannels.networks.includes(network)) return false;
  const entry = NETWORK_TABLE[network];
  if (entry.eip712 === undefined || (entry.transferMethod !== 'eip3009' && entry.transferMethod !== 'permit2'))
    return false;
  return deps.chains.evm.networks.get(network)?.walletClient !== undefined;
}

/**
 * Our 402's batch-settlement entry for `amountMicroUsdc` on a network (as @x402/evm's server writes
 * one): payTo and receiverAuthorizer are our wallet, the withdraw delay ours, and the minimum first
 * deposit CHANNEL_RECEIVER_MIN_DEPOSIT_MULTIPLIER times the price; where the stablecoin moves only by
 * Permit2, `assetTransferMethod: "permit2"` (the client deposits through the Permit2 collector).
 */
export function channelOffer(
  deps: Pick<Deps, 'chains' | 'config'>,
  network: NetworkName,
  { amountMicroUsdc, maxTimeoutSeconds }: { amountMicroUsdc: bigint; maxTimeoutSeconds: number },
): PaymentRequirementsV2 | undefined {
  if (!receivesChannelsOn(deps, network)) return undefined;
  const clients = deps.chains.evm.networks.get(network);
  const account = clients?.walletClient?.account;
  const { eip712, decimals, transferMethod } = NETWORK_TABLE[network];
  if (!clients || !account || !eip712) return undefined;
  const amount = microToAsset(amountMicroUsdc, decimals);
  if (amount <= 0n) return undefined;
  const { withdrawDelaySeconds, minDepositMultiplier } = deps.config.receiverChannels;
  return {
    scheme: BATCH_SETTLEMENT_SCHEME,
    network: caip2Of(network),
    amount: amount.toString(),
    asset: getAddress(clients.usdc),
    payTo: account.address,
    maxTimeoutSeconds,
    extra: {
      name: eip712.name,
      version: eip712.version,
      receiverAuthorizer: account.address,
      withdrawDelay: withdrawDelaySeconds,
      minDeposit: (amount * BigInt(minDepositMultiplier)).toString(),
      ...(transferMethod === 'permit2' ? { assetTransferMethod: 'permit2' } : {}),
    },
  };
}

/** A request admitted on a channel: its lease, the price it will be charged, and what the deposit (if any) did. */
export interface ChannelReservation {
  network: NetworkName;
  channelId: Hex;
  pendingId: string;
  payer: Address;
  increment: bigint;
  voucher: { maxClaimableAmount: bigint; signature: Hex };
  deposit?: { txHash: Hex; amount: bigint };
  /** The channel as it stood when admitted. */
  channel: StoredChannel;
  /** What the lease's own statement added to the caller's daily counters (ChannelSpend); absent when it added nothing. */
  counted?: SpendMove;
}

/**
 * The daily counters a request on a channel moves (the caller's limits), for its payer, network and
 * increment: added in the lease's own statement, the lease refused when one would pass its limit.
 */
export type ChannelSpend = (request: { payer: Address; network: NetworkName; increment: bigint }) => {
  move: SpendMove;
  limits: readonly bigint[];
};

/** A request refused by the daily counters (ChannelSpend): no lease was taken and nothing moved. */
export interface ChannelOverLimit {
  kind: 'over_limit';
  /** The position in `move.keys` of the first counter that refused (add_spend's, 1-based). */
  refusedBy: number;
  move: SpendMove;
  limits: readonly bigint[];
  payer: Address;
}

export type ChannelAcceptance =
  | { kind: 'reserved'; reservation: ChannelReservation }
  /** A cooperative refund: done (its transaction), nothing to serve. */
  | { kind: 'refunded'; channel: StoredChannel; txHash: Hex; amount: bigint; payer: Address }
  | { kind: 'refused'; refusal: ChannelRefusal };

const refused = (value: ChannelRefusal): ChannelAcceptance => ({ kind: 'refused', refusal: value });

function configRefusal(
  payload: ChannelPayload,
  offer: PaymentRequirementsV2,
  ours: Address,
  withdrawDelay: number,
  chainId: number,
): ChannelRefusal | undefined {
  const { config, voucher } = payload;
  const same = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();
  if (!same(config.receiver, offer.payTo))
    return refusal(CHANNEL_ERRORS.receiverMismatch, 'channelConfig.receiver is not our payTo');
  if (!same(config.receiverAuthorizer, ours))
    return refusal(
      CHANNEL_ERRORS.receiverAuthorizerMismatch,
      'channelConfig.receiverAuthorizer is not our receiver authorizer',
    );
  if (!same(config.token, offer.asset))
    return refusal(CHANNEL_ERRORS.tokenMismatch, 'channelConfig.token is not the asset offered');
  if (config.withdrawDelay !== withdrawDelay)
    return refusal(CHANNEL_ERRORS.withdrawDelayMismatch, `channelConfig.withdrawDelay is not ${withdrawDelay}`);
  if (cachedChannelIdOf(config, chainId) !== voucher.channelId.toLowerCase())
    return refusal(CHANNEL_ERRORS.channelIdMismatch, 'voucher.channelId is not the id of channelConfig');
  return undefined;
}

/** The voucher's signature: ECDSA against the payer authorizer locally, or the payer contract on chain (EIP-1271). */
async function voucherSigned(clients: EvmNetworkClients, payload: ChannelPayload): Promise<boolean | 'unavailable'> {
  const { config, voucher } = payload;
  if (config.payerAuthorizer.toLowerCase() !== ZERO_ADDRESS)
    return isVoucherSignedBy(config.payerAuthorizer, clients.chainId, voucher);
  const onchain = await voucherValidOnChain(clients, config.payer, voucher);
  return onchain.ok ? onchain.value : 'unavailable';
}

/** Seconds a Permit2 deposit must still be valid for when it reaches us: it is simulated, then sent. */
const PERMIT2_DEADLINE_MARGIN_SECONDS = 6n;

/**
 * What the chain would refuse of a Permit2 deposit without asking it (as @x402/evm's facilitator
 * checks it): signed by the channel's payer, to the Permit2 deposit collector, for the offered
 * token and this channel, and not expiring before it can be sent.
 */
function permit2DepositRefusal(
  deposit: Extract<ChannelDeposit, { method: 'permit2' }>,
  payload: ChannelPayload,
  offer: PaymentRequirementsV2,
  nowMs: number,
): ChannelRefusal | undefined {
  const same = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();
  if (!same(deposit.from, payload.config.payer))
    return refusal(CHANNEL_ERRORS.permit2InvalidSignature, 'permit2Authorization.from is not the channel payer');
  if (!same(deposit.spender, PERMIT2_DEPOSIT_COLLECTOR_ADDRESS))
    return refusal(
      CHANNEL_ERRORS.permit2InvalidSpender,
      'permit2Authorization.spender is not the Permit2 deposit collector',
    );
  if (!same(deposit.token, offer.asset))
    return refusal(CHANNEL_ERRORS.tokenMismatch, 'permit2Authorization.permitted.token is not the asset offered');
  if (!same(deposit.channelId, payload.voucher.channelId))
    return refusal(
      CHANNEL_ERRORS.channelIdMismatch,
      "permit2Authorization.witness.channelId is not the voucher's channel",
    );
  if (deposit.deadline < BigInt(Math.floor(nowMs / 1000)) + PERMIT2_DEADLINE_MARGIN_SECONDS)
    return refusal(CHANNEL_ERRORS.permit2DeadlineExpired, 'permit2Authorization.deadline has passed or is about to');
  return undefined;
}

const isFresh = (channel: StoredChannel | undefined, ttlMs: number, now: number) =>
  channel?.onchainSyncedAt !== undefined && now - channel.onchainSyncedAt.getTime() <= ttlMs;

/**
 * Takes a client's batch-settlement payload against `offer` (the entry of our 402 it accepted),
 * `leaseMs` the longest the request may hold its channel.
 */
export async function acceptChannelPayment(
  deps: ChannelDeps,
  rawPayload: unknown,
  offer: PaymentRequirementsV2,
  { leaseMs }: { leaseMs: number },
): Promise<ChannelAcceptance> {
  const accepted = await acceptChannel(deps, rawPayload, offer, leaseMs);
  if (accepted.kind === 'over_limit')
    throw new Error('a channel payment counted on no daily counter was refused by one');
  return accepted;
}

/**
 * acceptChannelPayment, the request's increment counted on `spend`'s daily counters too: for a
 * voucher on a channel as we last read it, in the lease's own statement (`reservation.counted`);
 * otherwise not counted (the caller counts it after the lease). `over_limit` when a counter refused
 * it: no lease was taken, nothing moved.
 */
export function acceptCountedChannelPayment(
  deps: ChannelDeps,
  rawPayload: unknown,
  offer: PaymentRequirementsV2,
  { leaseMs, spend }: { leaseMs: number; spend: ChannelSpend },
): Promise<ChannelAcceptance | ChannelOverLimit> {
  return acceptChannel(deps, rawPayload, offer, leaseMs, spend);
}

async function acceptChannel(
  deps: ChannelDeps,
  rawPayload: unknown,
  offer: PaymentRequirementsV2,
  leaseMs: number,
  spend?: ChannelSpend,
): Promise<ChannelAcceptance | ChannelOverLimit> {
  const read = readChannelPayload(rawPayload);
  if (!read.ok) return refused(refusal(CHANNEL_ERRORS.payloadType, read.details));
  const payload = read.value;
  const network = canonicalNetwork(offer.network);
  const clients = network === undefined ? undefined : receiverClients(deps, network);
  const ours = clients?.walletClient?.account.address;
  if (network === undefined || !clients || !ours)
    return refused(refusal(CHANNEL_ERRORS.stateUnavailable, `${offer.network} takes no channels here`, { ours: true }));
  const { withdrawDelaySeconds, onchainTtlSeconds, minDepositMultiplier } = deps.config.receiverChannels;
  const bad = configRefusal(payload, offer, ours, withdrawDelaySeconds, clients.chainId);
  if (bad) return refused(bad);
  const signed = await voucherSigned(clients, payload);
  if (signed === 'unavailable')
    return refused(refusal(CHANNEL_ERRORS.stateUnavailable, 'the payer contract could not be asked', { ours: true }));
  if (!signed)
    return refused(refusal(CHANNEL_ERRORS.voucherSignature, 'the voucher is not signed by the payer authorizer'));
  const channelId = payload.voucher.channelId.toLowerCase() as Hex;
  const price = BigInt(offer.amount);
  if (payload.type === 'deposit') {
    const minDeposit = price * BigInt(minDepositMultiplier);
    if (payload.deposit.amount < minDeposit)
      return refused(refusal(CHANNEL_ERRORS.depositBelowMin, `the deposit is below the minimum of ${minDeposit}`));
    const permit2Refusal =
      payload.deposit.method === 'permit2'
        ? permit2DepositRefusal(payload.deposit, payload, offer, deps.clock.now().getTime())
        : undefined;
    if (permit2Refusal) return refused(permit2Refusal);
    const simulated = await simulateDeposit(clients, payload.config, payload.deposit);
    if (!simulated.ok)
      return refused(
        refusal(CHANNEL_ERRORS.depositSimulation, `the deposit would fail: ${simulated.details}`, {
          ours: simulated.reason === 'rpc_unavailable',
        }),
      );
  }

  const now = deps.clock.now().getTime();
  const pendingId = randomUUID();
  const increment = payload.type === 'refund' ? 0n : price;
  const pending = { id: pendingId, until: new Date(now + leaseMs) };
  /** The request admitted: the lease `pendingId` on `channel`, under a voucher for `ceiling`. */
  const admitted = (
    channel: StoredChannel,
    ceiling: bigint,
    more: Pick<ChannelReservation, 'deposit' | 'counted'>,
  ): { kind: 'reserved'; reservation: ChannelReservation } => ({
    kind: 'reserved',
    reservation: {
      network,
      channelId,
      pendingId,
      payer: payload.config.payer,
      increment,
      voucher: { maxClaimableAmount: ceiling, signature: payload.voucher.signature },
      channel,
      ...more,
    },
  });
  if (payload.type === 'voucher') {
    // The common case, a voucher on a channel as we last read it (its chain state younger than the
    // TTL, the voucher at its charged total plus the price, within its balance): the lease, and the
    // counters, in one statement. Otherwise nothing moved, and the channel is read.
    const counting = spend?.({ payer: getAddress(payload.config.payer), network, increment });
    const fast = await leaseUnchanged(deps.db, channelId, {
      ceiling: payload.voucher.maxClaimableAmount,
      increment,
      freshSince: new Date(now - onchainTtlSeconds * 1000),
      pending,
      now: new Date(now),
      ...(counting ? { spend: counting } : {}),
    });
    if (fast !== undefined && 'refusedBy' in fast && counting)
      return { kind: 'over_limit', refusedBy: fast.refusedBy, ...counting, payer: payload.config.payer };
    if (fast !== undefined && 'leased' in fast)
      return admitted(fast.leased, payload.voucher.maxClaimableAmount, counting ? { counted: counting.move } : {});
  }

  // Our copy of the chain's state, read again when older than the TTL (outside the row lock).
  const stored = await findChannel(deps.db, channelId);
  let onchain: OnchainChannel | undefined;
  if (!isFresh(stored, onchainTtlSeconds * 1000, now)) {
    const fresh = await readChannelOnChain(clients, channelId);
    if (!fresh.ok) return refused(refusal(CHANNEL_ERRORS.stateUnavailable, fresh.details, { ours: true }));
    onchain = fresh.value;
  }

  const reserved = await updateChannel<ChannelRefusal | StoredChannel>(deps.db, channelId, (current) => {
    const charged = current?.chargedCumulative ?? 0n;
    const state: StoredChannel = current ?? {
      channelId,
      network,
      config: payload.config,
      chargedCumulative: 0n,
      signedMaxClaimable: 0n,
      signature: undefined,
      balance: onchain?.balance ?? 0n,
      totalClaimed: onchain?.totalClaimed ?? 0n,
      withdrawRequestedAt: onchain?.withdrawRequestedAt ?? 0,
      refundNonce: onchain?.refundNonce ?? 0n,
      onchainSyncedAt: undefined,
      pendingId: undefined,
      pendingUntil: undefined,
      lastRequestAt: undefined,
    };
    const view: StoredChannel = onchain ? { ...state, ...onchain } : state;
    // What the chain claimed is charged at least (a channel new to us, or a mirror lost).
    const base = charged > view.totalClaimed ? charged : view.totalClaimed;
    if (!current && payload.type !== 'deposit' && view.balance === 0n)
      return { result: refusal(CHANNEL_ERRORS.missingChannel, 'no such channel: open it with a deposit') };
    if (current?.pendingUntil !== undefined && current.pendingUntil.getTime() > now)
      return { result: refusal(CHANNEL_ERRORS.channelBusy, 'the channel is serving another request') };
    const expected = base + increment;
    if (payload.voucher.maxClaimableAmount !== expected) {
      const correction = { ...view, chargedCumulative: base };
      return {
        result: refusal(
          CHANNEL_ERRORS.cumulativeMismatch,
          `the voucher's maxClaimableAmount must be ${expected} (charged ${base} plus ${increment})`,
          {
            channelState: channelStateOf(correction),
            ...(current?.signature
              ? {
                  voucherState: {
                    signedMaxClaimable: current.signedMaxClaimable.toString(),
                    signature: current.signature,
                  },
                }
              : {}),
          },
        ),
        ...(onchain && current ? { write: { onchain } } : {}),
      };
    }
    return {
      result: { ...view, chargedCumulative: base },
      write: {
        network,
        config: payload.config,
        chargedCumulative: base,
        ...(current ? {} : { signedMaxClaimable: base }),
        ...(onchain ? { onchain } : {}),
        pending,
      },
    };
  });
  if ('code' in reserved) return refused(reserved);
  let channel = reserved;
  const release = () => releaseChannel(deps, channelId, pendingId);

  if (payload.type === 'refund') return cooperativeRefund(deps, clients, network, channel, payload, pendingId);

  let deposit: ChannelReservation['deposit'];
  if (payload.type === 'deposit') {
    const sent = await sendReceiverCall(
      deps,
      network,
      depositCall(payload.config, payload.deposit),
      () => Promise.resolve(true),
      60_000,
    );
    if (!sent.ok || sent.value.state !== 'confirmed') {
      await release();
      const why = sent.ok ? `the deposit transaction ${sent.value.hash} is ${sent.value.state}` : sent.details;
      return refused(refusal(CHANNEL_ERRORS.depositTransaction, why, { ours: !sent.ok }));
    }
    const after = await readChannelOnChain(clients, channelId);
    if (!after.ok) {
      await release();
      return refused(refusal(CHANNEL_ERRORS.stateUnavailable, after.details, { ours: true }));
    }
    await storeOnchain(deps.db, channelId, after.value);
    channel = { ...channel, ...after.value };
    deposit = { txHash: sent.value.hash, amount: payload.deposit.amount };
  }

  const ceiling = payload.voucher.maxClaimableAmount;
  const failure =
    ceiling > channel.balance
      ? refusal(
          CHANNEL_ERRORS.cumulativeExceedsBalance,
          `the voucher's ${ceiling} is above the channel's balance ${channel.balance}`,
        )
      : ceiling <= channel.totalClaimed
        ? refusal(
            CHANNEL_ERRORS.cumulativeBelowClaimed,
            `the voucher's ${ceiling} is not above what was claimed, ${channel.totalClaimed}`,
          )
        : undefined;
  if (failure) {
    await release();
    return refused(failure);
  }
  return admitted(channel, ceiling, deposit ? { deposit } : {});
}

/**
 * Ends a request's lease without a charge (the resource failed): the same voucher pays the next
 * request. `giveBack` (what the request added to daily counters) is taken back in the same statement.
 */
export async function releaseChannel(
  deps: Pick<Deps, 'db'>,
  channelId: Hex,
  pendingId: string,
  giveBack?: SpendMove,
): Promise<void> {
  await endLease(deps.db, channelId, pendingId, giveBack);
}

export type ChargeCommit =
  { ok: true; channel: StoredChannel; charged: bigint } | { ok: false; refusal: ChannelRefusal };

/**
 * The resource answered: the request's price is committed on the channel (charged so far plus the
 * increment, at most the voucher's ceiling), with the voucher as our claim on it, under the row
 * lock and only by the lease's holder; the charge row's unique (channel, cumulative) refuses any
 * second commit of that amount.
 */
export async function commitChannelCharge(
  deps: Pick<Deps, 'db' | 'log'>,
  reservation: ChannelReservation,
  targetUrl?: string,
  /** What this request costs when less than the price (a seller that charged less): at most the increment. */
  amount: bigint = reservation.increment,
  /** What the request added to daily counters and does not keep once charged: taken back with a committed charge only. */
  giveBack?: SpendMove,
): Promise<ChargeCommit> {
  if (amount < 0n || amount > reservation.increment)
    throw new RangeError(`a charge of ${amount} is outside 0..${reservation.increment}`);
  const { channelId, pendingId } = reservation;
  // The common case, the lease still held (and the voucher covering the charge): one statement,
  // with the counters' take-back.
  const charged =
    amount > 0n
      ? await chargeUnderLease(deps.db, channelId, chargeUnderLeaseOf(reservation, amount, targetUrl, giveBack))
      : await closeLeaseUncharged(deps.db, channelId, pendingId, giveBack);
  return finishChannelCharge(deps, reservation, { amount, targetUrl, giveBack }, charged);
}

/** What chargeUnderLease writes for a charge of `amount` under the reservation's lease. */
function chargeUnderLeaseOf(reservation: ChannelReservation, amount: bigint, targetUrl?: string, giveBack?: SpendMove) {
  return {
    pendingId: reservation.pendingId,
    amount,
    voucher: reservation.voucher,
    ...(targetUrl ? { targetUrl } : {}),
    ...(giveBack ? { giveBack } : {}),
  };
}

export { leaseChargedOf };

/**
 * commitChannelCharge's common case (a charge above nothing) as parts of a statement of another
 * room, which then hands what they read back to finishChannelCharge (payments/outgoing/channels.ts
 * records our own voucher's answer with it). The statement must wait for its WAL flush.
 */
export function channelChargeParts(
  reservation: ChannelReservation,
  amount: bigint,
  targetUrl?: string,
  giveBack?: SpendMove,
): { ctes: RawBuilder<unknown>; columns: RawBuilder<unknown> } {
  if (amount <= 0n || amount > reservation.increment)
    throw new RangeError(`a charge of ${amount} is outside 1..${reservation.increment}`);
  return chargeUnderLeaseParts(reservation.channelId, chargeUnderLeaseOf(reservation, amount, targetUrl, giveBack));
}

/**
 * The end of a commit whose common case ran (`charged`: the channel it charged, or undefined when
 * it moved nothing): else under the row lock, which says why it cannot be charged (nothing was
 * given back yet).
 */
export async function finishChannelCharge(
  deps: Pick<Deps, 'db' | 'log'>,
  reservation: ChannelReservation,
  { amount, targetUrl, giveBack }: { amount: bigint; targetUrl?: string | undefined; giveBack?: SpendMove | undefined },
  charged: StoredChannel | undefined,
): Promise<ChargeCommit> {
  const { channelId } = reservation;
  if (charged) return { ok: true, channel: charged, charged: amount };
  const committed = await commitLocked(deps, reservation, { amount, ...(targetUrl ? { reference: targetUrl } : {}) });
  if (committed.ok && giveBack)
    // The charge stands whatever happens to the counters (limits, not money): a take-back that
    // fails leaves them counting more than was charged, until the day ends.
    await giveBackSpend(deps.db, giveBack).catch((error: unknown) =>
      deps.log.error({ err: error, channelId }, 'daily counters not given back after a channel charge'),
    );
  return committed;
}

export type ChargeCommitAlong<T> =
  { ok: true; channel: StoredChannel; charged: bigint; value: T } | { ok: false; refusal: ChannelRefusal };

/**
 * The request's price committed in one database transaction with what it pays for (credits
 * bought): the charge row, the channel's new cumulative amount and the caller's own writes are one
 * commit, so a crash between them leaves both or neither. The rules of commitChannelCharge.
 */
export function commitChannelChargeAlong<T>(
  deps: Pick<Deps, 'db'>,
  reservation: ChannelReservation,
  {
    reference,
    along,
  }: {
    /** What the charge paid for, kept on its row (receiver_channel_charges.target_url). */
    reference: string;
    /** The caller's writes, in the charge's transaction; the cumulative amount identifies the charge. */
    along: (tx: Tx, charge: { cumulative: bigint; amount: bigint }) => Promise<T>;
  },
): Promise<ChargeCommitAlong<T>> {
  return commitLocked(deps, reservation, { amount: reservation.increment, reference, along });
}

/** A charge under the channel's row lock, with the caller's writes (`along`) in its transaction. */
async function commitLocked<T = undefined>(
  deps: Pick<Deps, 'db'>,
  reservation: ChannelReservation,
  {
    amount,
    reference,
    along,
  }: {
    amount: bigint;
    reference?: string;
    along?: (tx: Tx, charge: { cumulative: bigint; amount: bigint }) => Promise<T>;
  },
): Promise<ChargeCommitAlong<T>> {
  return updateChannel<ChargeCommitAlong<T>>(deps.db, reservation.channelId, async (current, tx) => {
    if (!current || current.pendingId !== reservation.pendingId)
      return {
        result: {
          ok: false,
          refusal: refusal(CHANNEL_ERRORS.channelBusy, 'the request lost its lease on the channel'),
        },
      };
    // Nothing to charge (a seller that charged nothing, no fee): the lease ends, the voucher pays the next request.
    if (amount === 0n && along === undefined)
      return {
        result: {
          ok: true,
          channel: { ...current, pendingId: undefined, pendingUntil: undefined },
          charged: 0n,
          value: undefined as T,
        },
        write: { pending: null, lastRequestAt: new Date() },
      };
    const ceiling = reservation.voucher.maxClaimableAmount;
    const cumulative = current.chargedCumulative + amount;
    if (cumulative > ceiling)
      return {
        result: {
          ok: false,
          refusal: refusal(
            CHANNEL_ERRORS.chargeExceedsSigned,
            `charged ${cumulative} exceeds the voucher's ${ceiling}`,
          ),
        },
        write: { pending: null },
      };
    await insertCharge(tx, {
      channelId: reservation.channelId,
      cumulative,
      amount,
      signedMaxClaimable: ceiling,
      ...(reference ? { targetUrl: reference } : {}),
    });
    const value = along ? await along(tx, { cumulative, amount }) : (undefined as T);
    const channel: StoredChannel = {
      ...current,
      chargedCumulative: cumulative,
      signedMaxClaimable: ceiling,
      signature: reservation.voucher.signature,
      pendingId: undefined,
      pendingUntil: undefined,
    };
    return {
      result: { ok: true, channel, charged: amount, value },
      write: {
        chargedCumulative: cumulative,
        signedMaxClaimable: ceiling,
        signature: reservation.voucher.signature,
        pending: null,
        lastRequestAt: new Date(),
      },
    };
  });
}

/**
 * A cooperative refund (payload `refund`, a zero-charge voucher at what we charged): the unused
 * balance (or the amount asked, at most that) goes back to the payer by refundWithSignature at the
 * channel's refund nonce, sent by our wallet; what we charged and have not claimed stays in the
 * channel for our next claim.
 */
async function cooperativeRefund(
  deps: ChannelDeps,
  clients: EvmNetworkClients,
  network: NetworkName,
  channel: StoredChannel,
  payload: Extract<ChannelPayload, { type: 'refund' }>,
  pendingId: string,
): Promise<ChannelAcceptance> {
  const release = () => releaseChannel(deps, channel.channelId, pendingId);
  const onchain = await readChannelOnChain(clients, channel.channelId);
  if (!onchain.ok) {
    await release();
    return refused(refusal(CHANNEL_ERRORS.stateUnavailable, onchain.details, { ours: true }));
  }
  const remainder = onchain.value.balance - channel.chargedCumulative;
  if (remainder <= 0n) {
    await release();
    return refused(refusal(CHANNEL_ERRORS.refundNoBalance, 'nothing is left to refund'));
  }
  const amount = payload.amount ?? remainder;
  if (amount > remainder) {
    await release();
    return refused(refusal(CHANNEL_ERRORS.refundAmountInvalid, `at most ${remainder} can be refunded`));
  }
  let hash: Hex | undefined;
  const call = await refundCall(clients, payload.config, channel.channelId, amount, onchain.value.refundNonce);
  const sent = await sendReceiverCall(
    deps,
    network,
    call,
    async (txHash) => {
      hash = txHash;
      await recordReceiverTransaction(deps.db, { network, kind: 'refund', txHash, channels: 1, amount });
      return true;
    },
    60_000,
  );
  if (!sent.ok || sent.value.state !== 'confirmed') {
    if (hash) await markReceiverTransaction(deps.db, hash, 'failed', sent.ok ? sent.value.state : sent.details);
    await release();
    return refused(
      refusal(CHANNEL_ERRORS.refundTransaction, sent.ok ? `refund ${sent.value.state}` : sent.details, { ours: true }),
    );
  }
  await markReceiverTransaction(deps.db, sent.value.hash, 'confirmed');
  const after = await readChannelOnChain(clients, channel.channelId);
  const state = after.ok ? after.value : { ...onchain.value, balance: onchain.value.balance - amount };
  await updateChannel(deps.db, channel.channelId, () => ({
    result: undefined,
    write: { onchain: state, pending: null },
  }));
  deps.log.info(
    { channelId: channel.channelId, network, amount: String(amount), txHash: sent.value.hash },
    'channel refunded cooperatively',
  );
  return {
    kind: 'refunded',
    channel: { ...channel, ...state },
    txHash: sent.value.hash,
    amount,
    payer: payload.config.payer,
  };
}
