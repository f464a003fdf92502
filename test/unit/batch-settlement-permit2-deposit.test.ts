// Permit2 channel deposits (payments/chains/evm/batchSettlement/permit2Deposit.ts) against @x402/evm
// 2.27's own client: its BatchSettlementEvmScheme's Permit2 deposit payload and ours have the same
// shape, each recovers to the payer under the other's EIP-712 types, and the receiving side reads
// both (a 78-digit Permit2 nonce included) while refusing a permitted amount that is not the
// deposit's and a payload carrying both authorizations.
import { toClientEvmSigner } from '@x402/evm';
import { BatchSettlementEvmScheme, computeChannelId } from '@x402/evm/batch-settlement/client';
import { getAddress, recoverTypedDataAddress, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { describe, expect, it } from 'vitest';
import type { EvmNetworkClients } from '../../payments/chains/evm/clients';
import { PERMIT2_ADDRESS } from '../../payments/chains/evm/permit2';
import { signChannelPayment } from '../../payments/chains/evm/batchSettlement/payer';
import { batchPermit2WitnessTypes } from '../../payments/chains/evm/batchSettlement/permit2Deposit';
import { PERMIT2_DEPOSIT_COLLECTOR_ADDRESS } from '../../payments/chains/evm/batchSettlement/voucher';
import { readChannelPayload } from '../../payments/incoming/channels/payload';
import type { PaymentRequirementsV2 } from '../../payments/x402/v2';

const CHAIN_ID = 4326;
const NETWORK = `eip155:${CHAIN_ID}`;
const payer = privateKeyToAccount(generatePrivateKey());
const receiver = privateKeyToAccount(generatePrivateKey()).address;
const TOKEN = getAddress('0xFAfDdbb3FC7688494971a79cc65DCa3EF82079E7');
const PRICE = 10n ** 16n;
const DEPOSIT = 25n * PRICE;
const salt = generatePrivateKey();

const offer: PaymentRequirementsV2 = {
  scheme: 'batch-settlement',
  network: NETWORK,
  amount: PRICE.toString(),
  asset: TOKEN,
  payTo: receiver,
  maxTimeoutSeconds: 300,
  extra: {
    name: 'MegaUSD',
    version: '1',
    receiverAuthorizer: receiver,
    withdrawDelay: 900,
    minDeposit: DEPOSIT.toString(),
    assetTransferMethod: 'permit2',
  },
};
const config = {
  payer: payer.address,
  payerAuthorizer: payer.address,
  receiver,
  receiverAuthorizer: receiver,
  token: TOKEN,
  withdrawDelay: 900,
  salt,
};

interface Permit2Payload {
  type: string;
  voucher: { channelId: Hex; maxClaimableAmount: string };
  deposit: {
    amount: string;
    authorization: {
      permit2Authorization: {
        from: string;
        permitted: { token: Hex; amount: string };
        spender: Hex;
        nonce: string;
        deadline: string;
        witness: { channelId: Hex };
        signature: Hex;
      };
    };
  };
}

async function theirs(): Promise<Permit2Payload> {
  const scheme = new BatchSettlementEvmScheme(toClientEvmSigner(payer), {
    salt,
    depositPolicy: { depositMultiplier: 25 },
  });
  const result = await scheme.createPaymentPayload(2, offer);
  return result.payload as unknown as Permit2Payload;
}

async function ours(): Promise<Permit2Payload> {
  const clients = { chainId: CHAIN_ID } as unknown as EvmNetworkClients;
  const payload = await signChannelPayment(payer, clients, offer, config, {
    ceiling: PRICE,
    deposit: DEPOSIT,
    method: 'permit2',
    nowSeconds: Math.floor(Date.now() / 1000),
  });
  return payload as unknown as Permit2Payload;
}

function shapeOf(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return typeof value;
  return Object.fromEntries(
    Object.entries(value as Record<string, unknown>)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([key, inner]) => [key, shapeOf(inner)]),
  );
}

function signer(payload: Permit2Payload): Promise<string> {
  const auth = payload.deposit.authorization.permit2Authorization;
  return recoverTypedDataAddress({
    domain: { name: 'Permit2', chainId: CHAIN_ID, verifyingContract: PERMIT2_ADDRESS },
    types: batchPermit2WitnessTypes,
    primaryType: 'PermitWitnessTransferFrom',
    message: {
      permitted: { token: auth.permitted.token, amount: BigInt(auth.permitted.amount) },
      spender: auth.spender,
      nonce: BigInt(auth.nonce),
      deadline: BigInt(auth.deadline),
      witness: { channelId: auth.witness.channelId },
    },
    signature: auth.signature,
  });
}

describe('Permit2 channel deposits', () => {
  it("are written as @x402/evm's client writes them, to the Permit2 collector for this channel", async () => {
    const [client, service] = await Promise.all([theirs(), ours()]);
    expect(shapeOf(service)).toEqual(shapeOf(client));
    const channelId = computeChannelId(config, NETWORK);
    for (const payload of [client, service]) {
      expect(payload).toMatchObject({
        type: 'deposit',
        voucher: { channelId, maxClaimableAmount: PRICE.toString() },
        deposit: {
          amount: DEPOSIT.toString(),
          authorization: {
            permit2Authorization: {
              from: payer.address,
              permitted: { token: TOKEN, amount: DEPOSIT.toString() },
              spender: PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
              witness: { channelId },
            },
          },
        },
      });
      // Signed under the same EIP-712 types: each recovers to the payer under ours.
      expect(await signer(payload)).toBe(payer.address);
    }
  });

  it('are read by the receiving side, and refused when the permitted amount is not the deposit', async () => {
    const payload = await theirs();
    const read = readChannelPayload(payload);
    expect(read.ok).toBe(true);
    if (!read.ok || read.value.type !== 'deposit') throw new Error('not a deposit');
    expect(read.value.deposit).toMatchObject({
      method: 'permit2',
      amount: DEPOSIT,
      nonce: BigInt(payload.deposit.authorization.permit2Authorization.nonce),
    });
    // A nonce of 78 digits (Permit2's are random 256-bit numbers) is read whole.
    const widest = structuredClone(payload);
    widest.deposit.authorization.permit2Authorization.nonce = (2n ** 256n - 1n).toString();
    expect(readChannelPayload(widest).ok).toBe(true);

    const more = structuredClone(payload);
    more.deposit.authorization.permit2Authorization.permitted.amount = (DEPOSIT + 1n).toString();
    expect(readChannelPayload(more).ok).toBe(false);
    const both = structuredClone(payload) as Permit2Payload & {
      deposit: { authorization: Record<string, unknown> };
    };
    both.deposit.authorization.erc3009Authorization = { validAfter: '0', validBefore: '1', salt, signature: '0x00' };
    expect(readChannelPayload(both).ok).toBe(false);
  });
});
