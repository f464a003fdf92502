/**
 * A client payment as verification hands it to the store: an EVM exact payment on base-sepolia
 * with a fresh nonce. For tests of the relay transaction rows, which need a row, not a chain.
 */
import { randomBytes } from 'node:crypto';
import type { VerifiedClientPayment } from '../../payments/incoming/types';

export const FIXTURE_USDC = '0x036CbD53842c5426634e7929541eC2318f3dCF7e';
export const FIXTURE_PAYER = '0x1111111111111111111111111111111111111111';
export const FIXTURE_PAY_TO = '0x2222222222222222222222222222222222222222';

export function verifiedPayment(
  nonce = `0x${randomBytes(32).toString('hex')}`,
  amount = 10_300n,
): VerifiedClientPayment {
  const requirements = {
    scheme: 'exact',
    network: 'base-sepolia',
    maxAmountRequired: amount.toString(),
    resource: 'http://127.0.0.1/relay',
    description: 'Relay payment',
    mimeType: 'application/json',
    payTo: FIXTURE_PAY_TO,
    maxTimeoutSeconds: 300,
    asset: FIXTURE_USDC,
    extra: { name: 'USDC', version: '2' },
  };
  const payment = {
    x402Version: 1 as const,
    scheme: 'exact' as const,
    network: 'base-sepolia',
    payload: {
      signature: `0x${'ab'.repeat(65)}`,
      authorization: {
        from: FIXTURE_PAYER,
        to: FIXTURE_PAY_TO,
        value: amount.toString(),
        validAfter: '1',
        validBefore: '4000000000',
        nonce,
      },
    },
  };
  return {
    network: 'base-sepolia',
    chainType: 'evm',
    payer: FIXTURE_PAYER,
    payTo: FIXTURE_PAY_TO,
    asset: FIXTURE_USDC,
    amountMicroUsdc: amount,
    idempotencyKey: { network: 'base-sepolia', asset: FIXTURE_USDC, nonceKey: nonce },
    payment,
    requirements,
    validBefore: 4_000_000_000n,
  };
}
