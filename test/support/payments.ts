/**
 * /proxy payment rows written through the money functions a paid call uses (held as signed, then
 * charged or released), without a chain: for the tests of what an organisation reads back.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { Db } from '../../db/index';
import { NO_POLICY } from '../../payments/accounts/policy';
import { chargeProxyPayment, holdProxyPayment, releaseProxyPayment } from '../../payments/operations/proxy/records';
import type { PaymentChoice } from '../../payments/x402/choose';
import { utcDay } from '../../payments/basics/clock';
import type { TestAccount } from './accounts';

/**
 * A choice of a target's USDC offer as /proxy makes it (payments/x402/choose.ts), for payment rows
 * written without a chain: on base (mainnet) or base-sepolia (testnet), at the given price.
 */
export function testPaymentChoice(
  options: { network?: 'base' | 'base-sepolia'; amountMicroUsdc?: bigint; resource?: string } = {},
): PaymentChoice {
  const network = options.network ?? 'base-sepolia';
  const amountMicroUsdc = options.amountMicroUsdc ?? 12_345n;
  return {
    requirements: {
      scheme: 'exact',
      network,
      maxAmountRequired: amountMicroUsdc.toString(),
      resource: options.resource ?? 'http://target.test/paid',
      description: 'paid',
      mimeType: 'application/json',
      payTo: '0x1111111111111111111111111111111111111111',
      maxTimeoutSeconds: 60,
      asset: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
    },
    index: 0,
    network,
    chainType: 'evm',
    networkClass: network === 'base' ? 'mainnet' : 'testnet',
    amountMicroUsdc,
  };
}

export type PaymentEnd = 'charged' | 'released' | 'pending';

export interface RecordedPayment {
  id: bigint;
  reference: string;
  txHash: string | null;
}

export async function recordProxyPayment(
  db: Db,
  account: TestAccount,
  payment: { targetUrl: string; amountMicroUsdc: bigint; credits: bigint; end: PaymentEnd },
): Promise<RecordedPayment> {
  const reference = `0x${randomBytes(32).toString('hex')}`;
  const choice = testPaymentChoice({ amountMicroUsdc: payment.amountMicroUsdc, resource: payment.targetUrl });
  const held = await holdProxyPayment(
    db,
    {
      reference,
      key: {
        apiKeyId: account.apiKeyId,
        prefix: account.prefix,
        dailyCapCredits: 1_000_000n,
        accountId: account.accountId,
        accountPublicId: account.accountPublicId,
        organisationId: account.organisationId,
        policy: NO_POLICY,
      },
      requestId: randomUUID(),
      targetUrl: payment.targetUrl,
      choice,
      credits: payment.credits,
      day: utcDay(new Date()),
      accountDailyLimitCredits: 1_000_000_000n,
      systemDailyLimitCredits: 1_000_000_000n,
    },
    // Written as signed, as /proxy writes a payment it has signed.
    { payer: '0x2222222222222222222222222222222222222222', validBefore: 1_900_000_000n },
  );
  if (!held.ok) throw new Error(`the test payment was not reserved: ${held.reason}`);
  let txHash: string | null = null;
  if (payment.end === 'charged') {
    txHash = `0x${randomBytes(32).toString('hex')}`;
    if (!(await chargeProxyPayment(db, reference, { txHash, outcome: 'test: settled' })))
      throw new Error('the test payment was not charged');
  } else if (payment.end === 'released') {
    if (!(await releaseProxyPayment(db, reference, { outcome: 'test: expired' })))
      throw new Error('the test payment was not released');
  }
  return { id: held.value.id, reference, txHash };
}
