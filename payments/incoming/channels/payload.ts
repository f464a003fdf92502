/**
 * A client's `batch-settlement` payment payload (PAYMENT-SIGNATURE's `payload`), read strictly into
 * typed values: `deposit` (an ERC-3009 authorization to the ERC-3009 deposit collector, or a Permit2
 * witness transfer to the Permit2 deposit collector, plus the first voucher), `voucher` (a new cumulative ceiling) or `refund` (a zero-charge voucher asking for the
 * unused balance back, optionally an amount). As @x402/evm 2.27's client writes them.
 */
import type { Address, Hex } from 'viem';
import type { ChannelConfig } from '../../chains/evm/batchSettlement/voucher';
import type { ChannelDeposit } from '../../chains/evm/batchSettlement/receiverChain';
import { isPlainObject } from '../../x402/parse';

export interface ChannelVoucher {
  channelId: Hex;
  maxClaimableAmount: bigint;
  signature: Hex;
}

export type ChannelPayload =
  | { type: 'voucher'; config: ChannelConfig; voucher: ChannelVoucher }
  | { type: 'deposit'; config: ChannelConfig; voucher: ChannelVoucher; deposit: ChannelDeposit }
  | { type: 'refund'; config: ChannelConfig; voucher: ChannelVoucher; amount?: bigint };

const ADDRESS = /^0x[0-9a-fA-F]{40}$/;
const BYTES32 = /^0x[0-9a-fA-F]{64}$/;
const HEX = /^0x(?:[0-9a-fA-F]{2})*$/;
const UINT = /^\d{1,78}$/;
const UINT128_LIMIT = 1n << 128n;

const address = (value: unknown): Address | undefined =>
  typeof value === 'string' && ADDRESS.test(value) ? (value as Address) : undefined;
const bytes32 = (value: unknown): Hex | undefined =>
  typeof value === 'string' && BYTES32.test(value) ? (value.toLowerCase() as Hex) : undefined;
const hex = (value: unknown): Hex | undefined =>
  typeof value === 'string' && HEX.test(value) && value.length > 2 ? (value as Hex) : undefined;
function uint(value: unknown, limit = UINT128_LIMIT): bigint | undefined {
  const text = typeof value === 'number' && Number.isSafeInteger(value) ? String(value) : value;
  if (typeof text !== 'string' || !UINT.test(text)) return undefined;
  const parsed = BigInt(text);
  return parsed < limit ? parsed : undefined;
}

function configOf(value: unknown): ChannelConfig | undefined {
  if (!isPlainObject(value)) return undefined;
  const payer = address(value.payer);
  const payerAuthorizer = address(value.payerAuthorizer);
  const receiver = address(value.receiver);
  const receiverAuthorizer = address(value.receiverAuthorizer);
  const token = address(value.token);
  const salt = bytes32(value.salt);
  const withdrawDelay = value.withdrawDelay;
  if (!payer || !payerAuthorizer || !receiver || !receiverAuthorizer || !token || !salt) return undefined;
  if (
    typeof withdrawDelay !== 'number' ||
    !Number.isInteger(withdrawDelay) ||
    withdrawDelay < 0 ||
    withdrawDelay >= 2 ** 40
  )
    return undefined;
  return { payer, payerAuthorizer, receiver, receiverAuthorizer, token, withdrawDelay, salt };
}

function voucherOf(value: unknown): ChannelVoucher | undefined {
  if (!isPlainObject(value)) return undefined;
  const channelId = bytes32(value.channelId);
  const maxClaimableAmount = uint(value.maxClaimableAmount);
  const signature = hex(value.signature);
  if (!channelId || maxClaimableAmount === undefined || !signature) return undefined;
  return { channelId, maxClaimableAmount, signature };
}

const UINT256_LIMIT = 1n << 256n;

function depositOf(value: unknown): ChannelDeposit | undefined {
  if (!isPlainObject(value) || !isPlainObject(value.authorization)) return undefined;
  const amount = uint(value.amount);
  if (amount === undefined || amount === 0n) return undefined;
  const { erc3009Authorization, permit2Authorization } = value.authorization;
  // One authorization, never both: which one the collector would be given must not be a guess.
  if (permit2Authorization !== undefined && erc3009Authorization !== undefined) return undefined;
  if (isPlainObject(permit2Authorization)) return permit2DepositOf(amount, permit2Authorization);
  if (!isPlainObject(erc3009Authorization)) return undefined;
  const validAfter = uint(erc3009Authorization.validAfter, UINT256_LIMIT);
  const validBefore = uint(erc3009Authorization.validBefore, UINT256_LIMIT);
  const salt = bytes32(erc3009Authorization.salt);
  const signature = hex(erc3009Authorization.signature);
  if (validAfter === undefined || validBefore === undefined || !salt || !signature) return undefined;
  return { method: 'eip3009', amount, validAfter, validBefore, salt, signature };
}

/** A Permit2 deposit: its permitted amount must be the deposit's (the collector moves `amount`). */
function permit2DepositOf(amount: bigint, auth: Record<string, unknown>): ChannelDeposit | undefined {
  const permitted = isPlainObject(auth.permitted) ? auth.permitted : undefined;
  const witness = isPlainObject(auth.witness) ? auth.witness : undefined;
  const from = address(auth.from);
  const token = address(permitted?.token);
  const permittedAmount = uint(permitted?.amount, UINT256_LIMIT);
  const spender = address(auth.spender);
  const nonce = uint(auth.nonce, UINT256_LIMIT);
  const deadline = uint(auth.deadline, UINT256_LIMIT);
  const channelId = bytes32(witness?.channelId);
  const signature = hex(auth.signature);
  if (!from || !token || !spender || !channelId || !signature) return undefined;
  if (nonce === undefined || deadline === undefined || permittedAmount !== amount) return undefined;
  return { method: 'permit2', amount, from, token, spender, nonce, deadline, channelId, signature };
}

/** The payload read, or why not (in words). */
export function readChannelPayload(
  value: unknown,
): { ok: true; value: ChannelPayload } | { ok: false; details: string } {
  if (!isPlainObject(value)) return { ok: false, details: 'payload is not an object' };
  const config = configOf(value.channelConfig);
  if (!config) return { ok: false, details: 'payload.channelConfig is not a channel config' };
  const voucher = voucherOf(value.voucher);
  if (!voucher)
    return { ok: false, details: 'payload.voucher is not a voucher (channelId, maxClaimableAmount, signature)' };
  switch (value.type) {
    case 'voucher':
      return { ok: true, value: { type: 'voucher', config, voucher } };
    case 'deposit': {
      const deposit = depositOf(value.deposit);
      if (!deposit)
        return {
          ok: false,
          details:
            'payload.deposit is neither an ERC-3009 deposit (amount, authorization.erc3009Authorization) nor a Permit2 deposit (amount, authorization.permit2Authorization for that amount)',
        };
      return { ok: true, value: { type: 'deposit', config, voucher, deposit } };
    }
    case 'refund': {
      if (value.amount === undefined) return { ok: true, value: { type: 'refund', config, voucher } };
      const amount = uint(value.amount);
      if (amount === undefined || amount === 0n)
        return { ok: false, details: 'payload.amount is not a positive amount' };
      return { ok: true, value: { type: 'refund', config, voucher, amount } };
    }
    default:
      return { ok: false, details: 'payload.type is none of deposit, voucher, refund' };
  }
}
