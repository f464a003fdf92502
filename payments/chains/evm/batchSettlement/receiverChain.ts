/**
 * The receiving side's dealings with the x402BatchSettlement contract: reading a channel's state,
 * checking on chain what cannot be checked locally (an EIP-1271 payer's voucher, a deposit, by
 * simulating it from our wallet), and the calls our wallet sends (a deposit through the ERC-3009 or
 * the Permit2 deposit collector, as the payer authorized it, a batch claim signed
 * by our receiver authorizer key, a settle, a cooperative refund), each through the submission
 * queue of our key (payments/chains/submissions.ts).
 */
import { BaseError, encodeFunctionData, type Address, type Hash, type Hex } from 'viem';
import type { NetworkName } from '../../../basics/networkTable';
import { fail, ok, type Result } from '../../../basics/result';
import type { ChainDeps } from '../../types';
import type { EvmNetworkClients } from '../clients';
import { submitEvmTransaction, waitForReceipt, type SubmitFailureReason } from '../submit';
import { permit2CollectorData, type Permit2Deposit } from './permit2Deposit';
import { batchSettlementReceiverAbi } from './receiverAbi';
import {
  BATCH_SETTLEMENT_ADDRESS,
  batchSettlementDomain,
  channelIdOf,
  claimBatchTypes,
  ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
  erc3009CollectorData,
  PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
  refundTypes,
  voucherTypes,
  type ChannelConfig,
} from './voucher';

/** What the contract holds for a channel now. withdrawRequestedAt: unix seconds, 0 when none is pending. */
export interface OnchainChannel {
  balance: bigint;
  totalClaimed: bigint;
  withdrawRequestedAt: number;
  refundNonce: bigint;
}

/** One row of a batch claim: the payer's voucher and the channel's new total claimed. */
export interface ReceiverClaim {
  config: ChannelConfig;
  maxClaimableAmount: bigint;
  signature: Hex;
  totalClaimed: bigint;
}

/** An ERC-3009 deposit as @x402/evm's client writes it (payload.deposit). */
export interface Erc3009Deposit {
  amount: bigint;
  validAfter: bigint;
  validBefore: bigint;
  salt: Hex;
  signature: Hex;
}

/** A client's deposit, by how its tokens move: an ERC-3009 authorization, or a Permit2 witness transfer. */
export type ChannelDeposit = ({ method: 'eip3009' } & Erc3009Deposit) | ({ method: 'permit2' } & Permit2Deposit);

export function receiverClients(deps: Pick<ChainDeps, 'chains'>, network: NetworkName): EvmNetworkClients | undefined {
  return deps.chains.evm.networks.get(network);
}

const message = (error: unknown) => (error instanceof BaseError ? error.shortMessage : String(error));

export async function readChannelOnChain(
  clients: EvmNetworkClients,
  channelId: Hex,
): Promise<Result<OnchainChannel, 'rpc_unavailable'>> {
  try {
    const base = { address: BATCH_SETTLEMENT_ADDRESS, abi: batchSettlementReceiverAbi, args: [channelId] } as const;
    const [[balance, totalClaimed], [, initiatedAt], refundNonce] = await Promise.all([
      clients.publicClient.readContract({ ...base, functionName: 'channels' }),
      clients.publicClient.readContract({ ...base, functionName: 'pendingWithdrawals' }),
      clients.publicClient.readContract({ ...base, functionName: 'refundNonce' }),
    ]);
    return ok({ balance, totalClaimed, withdrawRequestedAt: initiatedAt, refundNonce });
  } catch (error) {
    return fail('rpc_unavailable', `could not read channel ${channelId}: ${message(error)}`);
  }
}

/** An EIP-1271 payer's voucher (payerAuthorizer zero): the payer contract is asked (viem's verifyTypedData). */
export async function voucherValidOnChain(
  clients: EvmNetworkClients,
  payer: Address,
  voucher: { channelId: Hex; maxClaimableAmount: bigint; signature: Hex },
): Promise<Result<boolean, 'rpc_unavailable'>> {
  try {
    return ok(
      await clients.publicClient.verifyTypedData({
        address: payer,
        domain: batchSettlementDomain(clients.chainId),
        types: voucherTypes,
        primaryType: 'Voucher',
        message: { channelId: voucher.channelId, maxClaimableAmount: voucher.maxClaimableAmount },
        signature: voucher.signature,
      }),
    );
  } catch (error) {
    return fail('rpc_unavailable', message(error));
  }
}

/** The contract's deposit through the collector of the deposit's method. */
export function depositCall(config: ChannelConfig, deposit: ChannelDeposit): { to: Address; data: Hex } {
  const [collector, collectorData] =
    deposit.method === 'permit2'
      ? [PERMIT2_DEPOSIT_COLLECTOR_ADDRESS, permit2CollectorData(deposit)]
      : [
          ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
          erc3009CollectorData(deposit.validAfter, deposit.validBefore, deposit.salt, deposit.signature),
        ];
  return {
    to: BATCH_SETTLEMENT_ADDRESS,
    data: encodeFunctionData({
      abi: batchSettlementReceiverAbi,
      functionName: 'deposit',
      args: [{ ...config, withdrawDelay: config.withdrawDelay }, deposit.amount, collector, collectorData],
    }),
  };
}

/**
 * The deposit run against the chain's current state from our wallet, without sending: the
 * collector checks the payer's authorization (ERC-3009: ECDSA, EIP-1271 or a deployed wallet's;
 * Permit2: its signature over the channel id, amount and token, the payer's approval of Permit2
 * and the nonce), its balance, and the contract the config. `refused`: the chain says no (the reason).
 */
export async function simulateDeposit(
  clients: EvmNetworkClients,
  config: ChannelConfig,
  deposit: ChannelDeposit,
): Promise<Result<true, 'refused' | 'rpc_unavailable'>> {
  try {
    await clients.publicClient.call({
      ...(clients.walletClient ? { account: clients.walletClient.account.address } : {}),
      ...depositCall(config, deposit),
    });
    return ok(true);
  } catch (error) {
    // A local node may answer a revert as an internal error whose details carry the reason.
    const text =
      error instanceof BaseError && error.details ? `${error.shortMessage} (${error.details})` : message(error);
    if (/revert|execution reverted|invalid|signature/i.test(text)) return fail('refused', text);
    return fail('rpc_unavailable', text);
  }
}

/** Our receiver authorizer's signature of a batch claim (EIP-712 ClaimBatch). */
export async function signClaimBatch(clients: EvmNetworkClients, claims: readonly ReceiverClaim[]): Promise<Hex> {
  const account = clients.walletClient?.account;
  if (!account?.signTypedData) throw new Error('no wallet to sign the claim with');
  return account.signTypedData({
    domain: batchSettlementDomain(clients.chainId),
    types: claimBatchTypes,
    primaryType: 'ClaimBatch',
    message: {
      claims: claims.map((claim) => ({
        channelId: channelIdOf(claim.config, clients.chainId),
        maxClaimableAmount: claim.maxClaimableAmount,
        totalClaimed: claim.totalClaimed,
      })),
    },
  });
}

export function claimCall(claims: readonly ReceiverClaim[], authorizerSignature: Hex): { to: Address; data: Hex } {
  return {
    to: BATCH_SETTLEMENT_ADDRESS,
    data: encodeFunctionData({
      abi: batchSettlementReceiverAbi,
      functionName: 'claimWithSignature',
      args: [
        claims.map((claim) => ({
          voucher: { channel: claim.config, maxClaimableAmount: claim.maxClaimableAmount },
          signature: claim.signature,
          totalClaimed: claim.totalClaimed,
        })),
        authorizerSignature,
      ],
    }),
  };
}

export function settleCall(receiver: Address, token: Address): { to: Address; data: Hex } {
  return {
    to: BATCH_SETTLEMENT_ADDRESS,
    data: encodeFunctionData({ abi: batchSettlementReceiverAbi, functionName: 'settle', args: [receiver, token] }),
  };
}

/** A cooperative refund of `amount` at the channel's refund nonce, signed by our receiver authorizer. */
export async function refundCall(
  clients: EvmNetworkClients,
  config: ChannelConfig,
  channelId: Hex,
  amount: bigint,
  nonce: bigint,
): Promise<{ to: Address; data: Hex }> {
  const account = clients.walletClient?.account;
  if (!account?.signTypedData) throw new Error('no wallet to sign the refund with');
  const signature = await account.signTypedData({
    domain: batchSettlementDomain(clients.chainId),
    types: refundTypes,
    primaryType: 'Refund',
    message: { channelId, nonce, amount },
  });
  return {
    to: BATCH_SETTLEMENT_ADDRESS,
    data: encodeFunctionData({
      abi: batchSettlementReceiverAbi,
      functionName: 'refundWithSignature',
      args: [config, amount, nonce, signature],
    }),
  };
}

/** What sending one of our calls found: mined (success or reverted), or still pending with its hash. */
export type SentCall =
  { state: 'confirmed'; hash: Hash } | { state: 'reverted'; hash: Hash } | { state: 'pending'; hash: Hash };

/**
 * Sends one of our calls from our wallet through the submission queue; `record` stores the hash
 * before it is broadcast. Waits for the receipt at most `timeoutMs`.
 */
export async function sendReceiverCall(
  deps: Pick<ChainDeps, 'chains' | 'submissions'>,
  network: NetworkName,
  call: { to: Address; data: Hex },
  record: (hash: Hash) => Promise<boolean>,
  timeoutMs: number,
): Promise<Result<SentCall, SubmitFailureReason>> {
  const sent = await submitEvmTransaction<never>(deps, network, call, (signed) => record(signed.hash));
  if (!sent.ok) return sent;
  const receipt = await waitForReceipt(deps, network, sent.value.hash, { timeoutMs, pollMs: 100 });
  const { hash } = sent.value;
  if (receipt.status === 'success') return ok({ state: 'confirmed', hash });
  if (receipt.status === 'reverted') return ok({ state: 'reverted', hash });
  return ok({ state: 'pending', hash });
}
