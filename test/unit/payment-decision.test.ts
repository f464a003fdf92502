// Which refusal a target's offers get when we pay none of them (payments/outgoing/call.ts
// decidePayment): a token we do not hold on a network we pay on is named (asset_unsupported, a
// 422), on either family; a transfer method we do not sign is named first; anything else stays
// unpayable (a 502).
import { describe, expect, it } from 'vitest';
import type { NetworkSettings } from '../../payments/basics/config';
import type { Chains } from '../../payments/chains/index';
import { decidePayment } from '../../payments/outgoing/call';
import { NETWORK_TABLE } from '../../payments/basics/networkTable';
import type { PaymentRequirements } from '../../payments/x402/types';

const networks: NetworkSettings[] = [
  { name: 'base-sepolia', rpcUrl: 'http://127.0.0.1:9', usdc: NETWORK_TABLE['base-sepolia'].usdc },
  { name: 'solana-devnet', rpcUrl: 'http://127.0.0.1:9', usdc: NETWORK_TABLE['solana-devnet'].usdc },
];
const chains = {
  payingNetworks: () => networks,
  network: (name: string) => networks.find((settings) => settings.name === name),
} as unknown as Chains;

const OTHER_MINT = 'So11111111111111111111111111111111111111112';
const OTHER_TOKEN = '0x4200000000000000000000000000000000000006';

function entry(network: string, asset: string, overrides: Partial<PaymentRequirements> = {}): PaymentRequirements {
  const solana = network.startsWith('solana');
  return {
    scheme: 'exact',
    network,
    maxAmountRequired: '10000',
    resource: 'http://127.0.0.1/paid',
    description: '',
    mimeType: 'application/json',
    payTo: solana ? 'FoBzb1BPZR7iLVd2qFqV6mjoecvgdbYFbFaUBsTfZd92' : '0x209693Bc6afc0C5328bA36FaF03C514EF312287C',
    maxTimeoutSeconds: 60,
    asset,
    extra: solana ? { feePayer: 'FoBzb1BPZR7iLVd2qFqV6mjoecvgdbYFbFaUBsTfZd92' } : { name: 'USDC', version: '2' },
    ...overrides,
  };
}

const decide = (accepts: PaymentRequirements[]) =>
  decidePayment({ accepts }, { chains, maxAmountMicroUsdc: 1_000_000n });

describe('decidePayment when no offer can be paid', () => {
  it('names a Solana mint we do not hold: asset_unsupported, with the mint and ours; an offer in our USDC beside it is paid', () => {
    expect(decide([entry('solana-devnet', OTHER_MINT)])).toEqual({
      ok: false,
      reason: 'asset_unsupported',
      details: `the target asks to be paid in a token this service does not hold: asset ${OTHER_MINT} is not USDC on solana-devnet (${NETWORK_TABLE['solana-devnet'].usdc})`,
    });
    expect(decide([entry('solana-devnet', OTHER_MINT), entry('base-sepolia', networks[0]!.usdc)])).toMatchObject({
      ok: true,
      value: { network: 'base-sepolia', index: 1 },
    });
  });

  it('names EVM tokens we do not hold the same way, every one; other refusals stay unpayable', () => {
    const decision = decide([entry('base-sepolia', OTHER_TOKEN), entry('solana-devnet', OTHER_MINT)]);
    expect(decision).toMatchObject({ ok: false, reason: 'asset_unsupported' });
    expect(!decision.ok && decision.details).toContain(OTHER_TOKEN);
    expect(!decision.ok && decision.details).toContain(OTHER_MINT);

    // A network we do not pay on, an amount over the ceiling.
    expect(decide([entry('polygon', OTHER_TOKEN)])).toMatchObject({ ok: false, reason: 'unpayable' });
    expect(
      decide([entry('solana-devnet', NETWORK_TABLE['solana-devnet'].usdc, { maxAmountRequired: '2000000' })]),
    ).toMatchObject({ ok: false, reason: 'unpayable' });
  });
});
