/**
 * The standing approval a payment to a target needs first (today: Permit2's, on a target asking to
 * be paid through Permit2), given once per network, token, wallet and spender across every
 * process: the family says whether one is needed (it reads our allowance), the approval is given
 * under a database lock named after it, its transaction recorded in spending_approvals before the
 * broadcast and its gas once confirmed. A recorded confirmed approval is never given again.
 */
import { sql } from 'kysely';
import type { Deps } from '../deps';
import { familyOf } from '../chains/registry';
import type { SpendingApproval } from '../chains/family';
import type { PaymentChoice } from '../x402/choose';
import { fail, ok, type Result } from '../basics/result';

const LOCK_NAMESPACE = 'spending-approval:';

function keyOf(approval: SpendingApproval) {
  return {
    network: approval.network,
    token: approval.token.toLowerCase(),
    owner: approval.owner.toLowerCase(),
    spender: approval.spender.toLowerCase(),
  };
}

/** Ok once our wallet can pay `choice` as far as approvals go (none needed, or given now or before). */
export async function ensureSpendingApproval(
  deps: Pick<Deps, 'db' | 'chains' | 'submissions' | 'paymentBounds'>,
  choice: PaymentChoice,
): Promise<Result<true, string>> {
  const family = familyOf(choice.network);
  const needed = await family.spendingApproval(deps.chains, choice);
  if (!needed.ok) return needed;
  const approval = needed.value;
  if (approval === undefined) return ok(true);
  const key = keyOf(approval);
  const lockName = `${LOCK_NAMESPACE}${key.network}:${key.token}:${key.owner}:${key.spender}`;
  return deps.db.transaction().execute(async (trx) => {
    await sql`select pg_advisory_xact_lock(hashtextextended(${lockName}, 0))`.execute(trx);
    const recorded = await deps.db
      .selectFrom('spending_approvals')
      .select(['confirmed_at'])
      .where('network', '=', key.network)
      .where('token', '=', key.token)
      .where('owner', '=', key.owner)
      .where('spender', '=', key.spender)
      .executeTakeFirst();
    // Given by another payment while we waited for the lock.
    if (recorded?.confirmed_at) return ok(true);
    await deps.db
      .insertInto('spending_approvals')
      .values(key)
      .onConflict((conflict) => conflict.columns(['network', 'token', 'owner', 'spender']).doNothing())
      .execute();
    const given = await family.giveApproval(
      approval,
      async (txHash) => {
        await deps.db
          .updateTable('spending_approvals')
          .set({ tx_hash: txHash })
          .where('network', '=', key.network)
          .where('token', '=', key.token)
          .where('owner', '=', key.owner)
          .where('spender', '=', key.spender)
          .execute();
        return true;
      },
      deps,
    );
    if (!given.ok) return fail(given.reason, given.details);
    await deps.db
      .updateTable('spending_approvals')
      .set({
        tx_hash: given.value.txHash,
        gas_used: given.value.gasUsed,
        gas_fee_wei: given.value.feeWei,
        confirmed_at: new Date(),
      })
      .where('network', '=', key.network)
      .where('token', '=', key.token)
      .where('owner', '=', key.owner)
      .where('spender', '=', key.spender)
      .execute();
    return ok(true);
  });
}
