/**
 * Whether a Solana target's payTo can receive our payment, read before anything is signed.
 *
 * The exact payment moves the token into the payTo's associated token account for the mint. x402's
 * Solana clients never create that account: @x402/svm 2.27 (ExactSvmScheme.createPaymentPayload,
 * exact/client, and ExactSvmSchemeV1 for version 1) and x402 1.2 (createTransferInstructions) build
 * SetComputeUnitLimit, SetComputeUnitPrice and one TransferChecked into it (plus a Memo in
 * @x402/svm), whether it exists or not. Nor would a facilitator accept an instruction that creates
 * it: @x402/svm's (verifyStaticPath) wants the TransferChecked third and nothing but Memo or
 * Lighthouse after it, x402 1.2's exactly three instructions. A payment into a missing account is
 * refused at verification: x402 1.2's facilitator says
 * `invalid_exact_svm_payload_transaction_receiver_ata_not_found`, @x402/svm's simulation of it fails
 * (`invalid_exact_svm_transaction_simulation_failed`: the TransferChecked meets InvalidAccountData). So such a target cannot be paid by
 * anyone until its payTo opens the account; we say so before signing, in the dry runs already.
 */
import type { PaymentChoice } from '../../x402/choose';
import type { RecipientAccountProblem } from '../family';
import type { Chains } from '../types';

export async function solanaRecipientProblem(
  chains: Chains,
  { network, requirements }: PaymentChoice,
): Promise<RecipientAccountProblem | undefined> {
  const read = await chains.svm.usdcAccountOf(network, requirements.payTo);
  // Unreadable now: the builder reads the account again and refuses on its own.
  if (!read.ok || read.value.exists) return undefined;
  return {
    reason: 'pay_to_account_missing',
    details: `the target's payTo ${requirements.payTo} has no token account for ${requirements.asset} on ${network} (its associated token account ${read.value.account} does not exist); x402 payments on Solana transfer into that account and never create it, so the target cannot be paid until it opens one. Nothing was signed or paid.`,
  };
}
