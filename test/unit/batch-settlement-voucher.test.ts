// The receiving side's batch-settlement digests, computed over ABI words
// (payments/chains/evm/batchSettlement/voucher.ts), against @x402/evm 2.27's own: the channel id of
// many random configs equals its computeChannelId, a voucher signed by @x402/evm's client helper
// (signVoucher) is recognised by one local recovery, and one signed by another key, for another
// ceiling or another channel, is not.
import { computeChannelId, signVoucher } from '@x402/evm/batch-settlement/client';
import { toClientEvmSigner } from '@x402/evm';
import { getAddress, hashTypedData, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { describe, expect, it } from 'vitest';
import { serviceAccount } from '../../payments/chains/evm/account';
import { signChannelPayment } from '../../payments/chains/evm/batchSettlement/payer';
import type { EvmNetworkClients } from '../../payments/chains/evm/clients';
import type { PaymentRequirementsV2 } from '../../payments/x402/v2';
import {
  batchSettlementDomain,
  channelIdOf,
  isVoucherSignedBy,
  voucherDigest,
  voucherTypes,
  type ChannelConfig,
} from '../../payments/chains/evm/batchSettlement/voucher';

const CHAIN_ID = 84532;
const randomAddress = () => privateKeyToAccount(generatePrivateKey()).address;
const randomBytes32 = (): Hex => generatePrivateKey();

function randomConfig(): ChannelConfig {
  return {
    payer: randomAddress(),
    payerAuthorizer: randomAddress(),
    receiver: randomAddress(),
    receiverAuthorizer: randomAddress(),
    token: randomAddress(),
    withdrawDelay: 900 + Math.floor(Math.random() * 2_000_000),
    salt: randomBytes32(),
  };
}

describe('batch-settlement digests', () => {
  it('channel ids equal @x402/evm computeChannelId', () => {
    for (let i = 0; i < 50; i++) {
      const config = randomConfig();
      expect(channelIdOf(config, CHAIN_ID)).toBe(computeChannelId(config, `eip155:${CHAIN_ID}`).toLowerCase());
    }
  });

  it("voucher digests equal viem's hashTypedData of @x402/evm's voucher types", () => {
    for (let i = 0; i < 50; i++) {
      const channelId = randomBytes32();
      const amount = BigInt(Math.floor(Math.random() * 1e15));
      const digest = voucherDigest(CHAIN_ID, channelId, amount);
      expect(`0x${Buffer.from(digest).toString('hex')}`).toBe(
        hashTypedData({
          domain: batchSettlementDomain(CHAIN_ID),
          types: voucherTypes,
          primaryType: 'Voucher',
          message: { channelId, maxClaimableAmount: amount },
        }),
      );
    }
  });

  it("recognises @x402/evm's client vouchers by one recovery, and nothing else", async () => {
    const payer = privateKeyToAccount(generatePrivateKey());
    const other = privateKeyToAccount(generatePrivateKey());
    const config = { ...randomConfig(), payer: payer.address, payerAuthorizer: payer.address };
    const channelId = channelIdOf(config, CHAIN_ID);
    const signed = await signVoucher(toClientEvmSigner(payer), channelId, '123456', `eip155:${CHAIN_ID}`);
    const voucher = { channelId, maxClaimableAmount: 123456n, signature: signed.signature };
    expect(isVoucherSignedBy(getAddress(payer.address), CHAIN_ID, voucher)).toBe(true);
    expect(isVoucherSignedBy(other.address, CHAIN_ID, voucher)).toBe(false);
    expect(isVoucherSignedBy(payer.address, CHAIN_ID, { ...voucher, maxClaimableAmount: 123457n })).toBe(false);
    expect(isVoucherSignedBy(payer.address, CHAIN_ID, { ...voucher, channelId: randomBytes32() })).toBe(false);
    expect(isVoucherSignedBy(payer.address, CHAIN_ID + 1, voucher)).toBe(false);
    expect(isVoucherSignedBy(payer.address, CHAIN_ID, { ...voucher, signature: '0x1234' })).toBe(false);
  });

  it("signs our vouchers to the very bytes of @x402/evm's signVoucher, with our wallet", async () => {
    const key = generatePrivateKey();
    const account = serviceAccount(key);
    const config = { ...randomConfig(), payer: account.address, payerAuthorizer: account.address };
    const offer = {
      scheme: 'batch-settlement',
      network: `eip155:${CHAIN_ID}`,
      asset: config.token,
      amount: '1000',
      payTo: config.receiver,
      maxTimeoutSeconds: 60,
      extra: { receiverAuthorizer: config.receiverAuthorizer, withdrawDelay: config.withdrawDelay },
    } as PaymentRequirementsV2;
    // A voucher alone reads nothing from the chain: no client is ever called.
    const clients = { chainId: CHAIN_ID } as EvmNetworkClients;
    for (const ceiling of [1n, 123_456n, 10n ** 30n]) {
      const payload = await signChannelPayment(account, clients, offer, config, { ceiling });
      const theirs = await signVoucher(
        toClientEvmSigner(privateKeyToAccount(key)),
        channelIdOf(config, CHAIN_ID),
        ceiling.toString(),
        offer.network,
      );
      expect(payload).toEqual({
        type: 'voucher',
        channelConfig: config,
        voucher: { ...theirs, channelId: theirs.channelId.toLowerCase() },
      });
    }
  });
});
