/**
 * Batch-settlement voucher verifications per second on one core (one thread), as /relay checks a
 * channel client's voucher before serving it: the channel id bound to the config (the binding
 * check; remembered per config, as a channel's config comes with each of its requests), one signature recovery against the payer authorizer, and the cumulative amount
 * against the mirrored state. No chain read, no database (the row lock and lease are the
 * database's part, measured by the relay bench). Prints the figure beside the goal.
 *
 *   npx tsx load/runner/voucher-verify-bench.ts [--count N] [--seconds S]
 *   (also `npm run bench -- --only vouchers`)
 */
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import type { Hex } from 'viem';
import { processSecp256k1, signDigest } from '../../payments/basics/secp256k1';
import {
  cachedChannelIdOf,
  channelIdOf,
  isVoucherSignedBy,
  voucherDigest,
  type ChannelConfig,
} from '../../payments/chains/evm/batchSettlement/voucher';

export const VOUCHER_GOAL_PER_S = 5_000;
const CHAIN_ID = 84532;

function argument(name: string, fallback: number): number {
  const at = process.argv.indexOf(`--${name}`);
  const value = at === -1 ? undefined : Number(process.argv[at + 1]);
  return value !== undefined && Number.isFinite(value) && value > 0 ? value : fallback;
}

interface Signed {
  config: ChannelConfig;
  channelId: Hex;
  maxClaimableAmount: bigint;
  signature: Hex;
  charged: bigint;
  price: bigint;
  balance: bigint;
}

function vouchers(count: number): Signed[] {
  const receiver = privateKeyToAccount(generatePrivateKey()).address;
  const token = privateKeyToAccount(generatePrivateKey()).address;
  const out: Signed[] = [];
  for (let i = 0; i < count; i++) {
    const key = generatePrivateKey();
    const payer = privateKeyToAccount(key).address;
    const config: ChannelConfig = {
      payer,
      payerAuthorizer: payer,
      receiver,
      receiverAuthorizer: receiver,
      token,
      withdrawDelay: 86_400,
      salt: `0x${'00'.repeat(32)}`,
    };
    const channelId = channelIdOf(config, CHAIN_ID);
    const price = 1_000n + BigInt(i % 100);
    const charged = BigInt(i) * price;
    const maxClaimableAmount = charged + price;
    const digest = voucherDigest(CHAIN_ID, channelId, maxClaimableAmount);
    const signature = signDigest(key, `0x${Buffer.from(digest).toString('hex')}`);
    out.push({ config, channelId, maxClaimableAmount, signature, charged, price, balance: maxClaimableAmount * 10n });
  }
  return out;
}

/** One voucher checked as the receiver checks it; false for any refusal. */
export function verifyVoucher(v: Signed): boolean {
  if (cachedChannelIdOf(v.config, CHAIN_ID) !== v.channelId) return false;
  if (!isVoucherSignedBy(v.config.payerAuthorizer, CHAIN_ID, v)) return false;
  if (v.maxClaimableAmount !== v.charged + v.price) return false;
  return v.maxClaimableAmount <= v.balance;
}

export function runVoucherBench({ count, seconds }: { count: number; seconds: number }): {
  perSecond: number;
  implementation: string;
} {
  const signed = vouchers(count);
  // Warm-up: the JIT and the domain separators.
  for (const v of signed.slice(0, Math.min(200, count))) verifyVoucher(v);
  let done = 0;
  const started = process.hrtime.bigint();
  const until = started + BigInt(Math.round(seconds * 1e9));
  while (process.hrtime.bigint() < until) {
    for (const v of signed) {
      if (!verifyVoucher(v)) throw new Error('a valid voucher was refused');
      done++;
    }
  }
  const elapsedS = Number(process.hrtime.bigint() - started) / 1e9;
  return { perSecond: done / elapsedS, implementation: processSecp256k1().implementation.name };
}

if (process.argv[1]?.endsWith('voucher-verify-bench.ts')) {
  const { perSecond, implementation } = runVoucherBench({
    count: argument('count', 2_000),
    seconds: argument('seconds', 5),
  });
  const verdict = perSecond >= VOUCHER_GOAL_PER_S ? 'met' : 'NOT met';
  console.log(
    `batch-settlement voucher verifications: ${Math.round(perSecond).toLocaleString('en-US')}/s on one core (secp256k1 ${implementation}); goal >= ${VOUCHER_GOAL_PER_S.toLocaleString('en-US')}/s: ${verdict}`,
  );
}
