/**
 * The exact scheme on Solana, its wire side (x402/schemes.ts): the payload is a partially signed
 * transaction (`{transaction}`, base64), and a target's requirement must name a Solana payTo and
 * the fee payer (`extra.feePayer`) that co-signs it; addresses compare exactly (base58).
 */
import { createHash } from 'node:crypto';
import { isAddress } from '@solana/kit';
import { fail, ok, type Result } from '../../basics/result';
import { isPlainObject } from '../../x402/parse';
import type { PaymentScheme } from '../../x402/schemes';
import type { ExactSvmPayload } from '../../x402/types';

/** A Solana transaction is at most 1232 bytes. */
const MAX_SVM_TRANSACTION_BASE64_CHARS = 4 * 1024;
const BASE64 = /^[A-Za-z0-9+/_-]+={0,2}$/;

function checkPayload(payload: unknown): Result<ExactSvmPayload, 'invalid_payload'> {
  if (!isPlainObject(payload)) return fail('invalid_payload', 'Solana payload needs a transaction');
  const { transaction } = payload;
  if (
    typeof transaction !== 'string' ||
    transaction.length > MAX_SVM_TRANSACTION_BASE64_CHARS ||
    !BASE64.test(transaction)
  ) {
    return fail('invalid_payload', 'transaction is not a base64 wire transaction');
  }
  return ok({ transaction });
}

export const EXACT_SOLANA: PaymentScheme = {
  scheme: 'exact',
  transferMethods: ['spl'],
  checkPayload,
  sameAsset: (asset, configured) => asset === configured,
  recognizes: (payload) => 'transaction' in payload,
  // The payer is read only from the signed transaction, so the payment names itself.
  replayIdentity: (payload) => ({
    payer: undefined,
    payment: createHash('sha256')
      .update((payload as ExactSvmPayload).transaction)
      .digest('hex'),
  }),
  recipientProblem: (requirements) => {
    if (!isAddress(requirements.payTo))
      return { reason: 'invalid_pay_to', details: `payTo ${requirements.payTo} is not a Solana address` };
    const feePayer = requirements.extra?.feePayer;
    if (feePayer === undefined || feePayer === null || feePayer === '')
      return { reason: 'missing_fee_payer', details: 'extra.feePayer is missing' };
    if (typeof feePayer !== 'string' || !isAddress(feePayer))
      return { reason: 'invalid_fee_payer', details: 'extra.feePayer is not a Solana address' };
    return undefined;
  },
};
