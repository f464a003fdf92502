/**
 * Admission of a verified client payment: the relay transaction is recorded and counted against
 * the daily relay limits (per paying wallet and for the whole service, per network class), with
 * when the follow job (./follow.ts) finishes it should its request never come back, all in one statement: the database
 * function admit_relay_payment (db/functions/admit_relay_payment.sql). A caller that settles the
 * payment at once admits it already claimed for settling (settleMethod), which saves the claim's
 * own write. An upto permit is also counted against the bounds on upto exposure (per wallet and
 * for the service: the maxima admitted and not yet settled or ended), and refused from a payer that
 * once failed to pay one. A repeated payment (the unique nonce), a limit or bound that would be
 * exceeded, a defaulted payer's permit or a lost idempotency claim writes nothing.
 */
import { sql } from 'kysely';
import type { Db } from '../../../db/index';
import type { SettlementMethod } from '../../../db/schema';
import { firstRow } from '../../../db/rows';
import { DEFAULT_MAX_ATTEMPTS, type JobName } from '../../basics/jobs';
import { NETWORK_TABLE } from '../../basics/networkTable';
import { fail, ok, type Result } from '../../basics/result';
import { IdempotencyClaimLost, type ClaimRef } from '../../basics/idempotency';
import type { RelayRequest } from '../../incoming/store';
import type { VerifiedClientPayment } from '../../incoming/types';
import { runPrepared } from '../../../db/prepared';

export interface RelayLimitRefusal {
  scope: 'wallet' | 'system';
  spentMicro: bigint;
  limitMicro: bigint;
  requestedMicro: bigint;
}

/** An upto permit refused by a bound on our exposure: the open maxima counted on it, the bound, this permit's maximum. */
export interface UptoExposureRefusal {
  scope: 'wallet' | 'total';
  openMicro: bigint;
  limitMicro: bigint;
  requestedMicro: bigint;
}

export type Admission =
  | Result<{ id: bigint }, 'nonce_already_used' | 'upto_payer_defaulted'>
  | { ok: false; reason: 'limit_exceeded'; refusal: RelayLimitRefusal }
  | { ok: false; reason: 'upto_exposure_exceeded'; exposure: UptoExposureRefusal };

/** A permit paid by upto: its maximum in the asset's atomic units, and the bounds on open upto maxima (micro-USDC). */
export interface AdmittedUpto {
  maximumAtomic: bigint;
  exposurePerWalletMicro: bigint;
  exposureTotalMicro: bigint;
}

interface AdmissionRow {
  outcome:
    | 'admitted'
    | 'claim_lost'
    | 'nonce_already_used'
    | 'limit_exceeded'
    | 'upto_payer_defaulted'
    | 'upto_exposure_exceeded';
  relay_transaction_id: bigint | null;
  limit_scope: 'wallet' | 'system' | 'total' | null;
  spent: bigint | null;
}

export async function admitClientPayment(
  db: Db,
  verified: VerifiedClientPayment,
  request: Omit<RelayRequest, 'idempotencyClaim'> & {
    spendDay: string;
    idempotency?: ClaimRef;
    /** Admit the row already claimed for settling by this method (the caller settles it next); received without. */
    settleMethod?: SettlementMethod;
  },
  limits: { perWalletMicro: bigint; systemMicro: bigint; finishBy: Date },
  /** A permit paid by upto: the row says so, with the maximum, from its first write; counted against the exposure bounds. */
  upto?: AdmittedUpto,
): Promise<Admission> {
  const networkClass = NETWORK_TABLE[verified.network].networkClass;
  const amount = verified.amountMicroUsdc;
  const { network, asset, nonceKey } = verified.idempotencyKey;
  const { idempotency } = request;
  const admission = sql<AdmissionRow>`
    select outcome, relay_transaction_id, limit_scope, spent from admit_relay_payment(
      ${network}::text, ${verified.chainType}::text, ${asset}::text, ${verified.payer}::text,
      ${verified.payTo}::text, ${amount}::bigint, ${nonceKey}::text,
      ${JSON.stringify(verified.payment)}::jsonb, ${JSON.stringify(verified.requirements)}::jsonb,
      ${verified.validBefore ?? null}::bigint, ${request.targetUrl ?? null}::text,
      ${request.targetMethod ?? null}::text, ${request.targetNetwork ?? null}::text,
      ${request.targetAmountMicroUsdc ?? null}::bigint, ${request.spendDay}::date, ${request.mode ?? null}::text,
      ${idempotency?.scope ?? null}::text, ${idempotency?.key ?? null}::text, ${idempotency?.claim ?? null}::uuid,
      ${networkClass}::text, ${limits.perWalletMicro}::bigint, ${limits.systemMicro}::bigint,
      ${'relay_follow' satisfies JobName}::text, ${limits.finishBy.toISOString()}::timestamptz, ${DEFAULT_MAX_ATTEMPTS}::integer,
      ${upto ? 'upto' : 'exact'}::text, ${upto ? upto.maximumAtomic.toString() : null}::numeric,
      ${request.settleMethod ?? null}::text, ${upto?.exposurePerWalletMicro ?? null}::bigint, ${upto?.exposureTotalMicro ?? null}::bigint
    )`;
  const { rows } = await runPrepared(db, admission.compile(db));
  const row = firstRow(rows, 'admit_relay_payment');
  switch (row.outcome) {
    case 'admitted':
      if (row.relay_transaction_id === null) throw new Error('admit_relay_payment admitted no row');
      return ok({ id: row.relay_transaction_id });
    case 'claim_lost':
      if (!idempotency) throw new Error('admit_relay_payment lost a claim it was not given');
      throw new IdempotencyClaimLost(idempotency);
    case 'nonce_already_used':
      return fail('nonce_already_used', `this payment (${network}, ${nonceKey}) was already used`);
    case 'upto_payer_defaulted':
      return fail(
        'upto_payer_defaulted',
        `${verified.payer} once failed to pay an upto charge after its call was made: it is not admitted by upto again; pay by exact`,
      );
    case 'upto_exposure_exceeded': {
      const scope = row.limit_scope === 'wallet' ? 'wallet' : 'total';
      return {
        ok: false,
        reason: 'upto_exposure_exceeded',
        exposure: {
          scope,
          openMicro: row.spent ?? 0n,
          limitMicro: (scope === 'wallet' ? upto?.exposurePerWalletMicro : upto?.exposureTotalMicro) ?? 0n,
          requestedMicro: amount,
        },
      };
    }
    case 'limit_exceeded': {
      const scope = row.limit_scope === 'system' ? 'system' : 'wallet';
      return {
        ok: false,
        reason: 'limit_exceeded',
        refusal: {
          scope,
          spentMicro: row.spent ?? 0n,
          limitMicro: scope === 'wallet' ? limits.perWalletMicro : limits.systemMicro,
          requestedMicro: amount,
        },
      };
    }
  }
}
