/**
 * Admission of a verified client payment: the relay transaction is recorded and counted against
 * the daily relay limits (per paying wallet and for the whole service, per network class) in one
 * database transaction, with the job that finishes it should its request never come back. A
 * repeated payment (the unique nonce) or a limit that would be exceeded writes nothing.
 */
import type { Db, Tx } from '../../db/index';
import { tryAddSpend, SYSTEM_SCOPE_ID, type SpendKey } from '../limits';
import { NETWORK_TABLE } from '../networkTable';
import { ok, type Result } from '../result';
import { holdIdempotencyClaim, type ClaimRef } from '../idempotency';
import { enqueueRelayWatch } from './outcome';
import { recordClientPayment, type RelayRequest, type RelayTransaction } from '../incoming/store';
import type { VerifiedClientPayment } from '../incoming/types';

export interface RelayLimitRefusal {
  scope: 'wallet' | 'system';
  spentMicro: bigint;
  limitMicro: bigint;
  requestedMicro: bigint;
}

export type Admission =
  Result<RelayTransaction, 'nonce_already_used'> | { ok: false; reason: 'limit_exceeded'; refusal: RelayLimitRefusal };

class LimitExceeded extends Error {
  constructor(readonly refusal: RelayLimitRefusal) {
    super(`daily ${refusal.scope} relay limit`);
  }
}

/** Adds `amount` to the day's spend of `key` within `limitMicro`, or throws the refusal of `scope`. */
async function addSpendOrRefuse(
  tx: Tx,
  scope: RelayLimitRefusal['scope'],
  key: SpendKey,
  amount: bigint,
  limitMicro: bigint,
): Promise<void> {
  const added = await tryAddSpend(tx, key, amount, limitMicro);
  if (!added.admitted) throw new LimitExceeded({ scope, spentMicro: added.spent, limitMicro, requestedMicro: amount });
}

export async function admitClientPayment(
  db: Db,
  verified: VerifiedClientPayment,
  request: Omit<RelayRequest, 'idempotencyClaim'> & { spendDay: string; idempotency?: ClaimRef },
  limits: { perWalletMicro: bigint; systemMicro: bigint; finishBy: Date },
): Promise<Admission> {
  const networkClass = NETWORK_TABLE[verified.network].networkClass;
  const amount = verified.amountMicroUsdc;
  try {
    return await db.transaction().execute(async (tx) => {
      // A call run under an idempotency record records money only while its claim is the record's.
      const { idempotency, ...recording } = request;
      if (idempotency) await holdIdempotencyClaim(tx, idempotency);
      const recorded = await recordClientPayment(tx, verified, {
        ...recording,
        ...(idempotency ? { idempotencyClaim: idempotency.claim } : {}),
      });
      if (!recorded.ok) return recorded;
      const day = request.spendDay;
      await addSpendOrRefuse(
        tx,
        'wallet',
        { scope: 'relay_wallet', scopeId: verified.payer, networkClass, day },
        amount,
        limits.perWalletMicro,
      );
      await addSpendOrRefuse(
        tx,
        'system',
        { scope: 'relay_system', scopeId: SYSTEM_SCOPE_ID, networkClass, day },
        amount,
        limits.systemMicro,
      );
      await enqueueRelayWatch(tx, recorded.value.id, limits.finishBy);
      return ok(recorded.value);
    });
  } catch (error) {
    if (error instanceof LimitExceeded) return { ok: false, reason: 'limit_exceeded', refusal: error.refusal };
    throw error;
  }
}
