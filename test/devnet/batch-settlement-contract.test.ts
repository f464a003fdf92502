// x402's batch-settlement channels on a local chain (contracts/BatchSettlement.sol): the committed
// artifact is what the source compiles to, and the unmodified @x402/evm 2.27 batch-settlement client
// and facilitator schemes work against the planted contracts with the chain's real USDC (driven
// without an HTTP server: the client signs, the facilitator verifies and settles, and each charge is
// committed to the client's channel storage as a PAYMENT-RESPONSE would). Two payers each open a
// channel by an ERC-3009 deposit and sign several vouchers; one claim transaction covers both
// channels, one settle moves the claimed total to the receiver in one transfer, a cooperative refund
// returns part of one channel, and a timed withdrawal returns the other's unclaimed remainder after
// its delay (claimed during the delay first). A deposit by Permit2 goes through the Permit2
// collector, and a smart-wallet payer without a payer authorizer is checked through ERC-1271. A
// voucher signed by the wrong key is refused by the facilitator and by the contract. Every balance
// is read from the chain. The withdrawal moves the chain's clock ahead of the wall clock, so it
// runs last.
import type { PaymentPayload, PaymentRequirements } from '@x402/core/types';
import { toClientEvmSigner, toFacilitatorEvmSigner } from '@x402/evm';
import {
  BatchSettlementEvmScheme,
  InMemoryClientChannelStorage,
  computeChannelId,
  signVoucher,
  updateChannelFromSettle,
} from '@x402/evm/batch-settlement/client';
import { BatchSettlementEvmScheme as BatchSettlementFacilitatorScheme } from '@x402/evm/batch-settlement/facilitator';
import {
  createTestClient,
  createWalletClient,
  getAddress,
  hashTypedData,
  maxUint256,
  parseAbi,
  parseEventLogs,
  type Address,
  type Hash,
  type Hex,
  type LocalAccount,
  zeroAddress,
} from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { batchSettlementArtifact } from '../../contracts/BatchSettlement.artifact.js';
import {
  BATCH_SETTLEMENT_ADDRESS,
  batchSettlementAbi,
  ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
  installBatchSettlement,
  PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
} from '../../devnet/evm/batch-settlement.js';
import {
  compileBatchSettlement,
  renderBatchSettlementArtifactModule,
} from '../../devnet/evm/batch-settlement-artifact.js';
import { localTransport, startEvmChain, type LocalEvmChain } from '../../devnet/evm/chain.js';
import { installPermit2, PERMIT2_ADDRESS } from '../../devnet/evm/permit2.js';
import { createSmartWallet, deployWalletFactory } from '../../devnet/evm/smart-wallet.js';
import { installUsdc, waitForSuccess, type LocalUsdc } from '../../devnet/evm/usdc.js';
import { KeyedQueue } from '../../devnet/key-queue.js';
import { EVM_NETWORKS } from '../../devnet/networks.js';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base-sepolia' as const;
const CAIP2 = `eip155:${EVM_NETWORKS[NETWORK].chainId}`;
const WITHDRAW_DELAY = 900;
const PRICE = 1_000n;
const DEPOSIT = 100_000n;
const GAS = 10n ** 20n;

const PRIVATE_KEYS = {
  minter: generatePrivateKey(),
  relayer: generatePrivateKey(),
  payerA: generatePrivateKey(),
  stranger: generatePrivateKey(),
};
const minter = privateKeyToAccount(PRIVATE_KEYS.minter);
const relayer = privateKeyToAccount(PRIVATE_KEYS.relayer);
const payerA = privateKeyToAccount(PRIVATE_KEYS.payerA);
const stranger = privateKeyToAccount(PRIVATE_KEYS.stranger);
const receiver = privateKeyToAccount(generatePrivateKey());
const receiverAuthorizer = privateKeyToAccount(generatePrivateKey());
const payerB = privateKeyToAccount(generatePrivateKey());

const transferEvent = parseAbi(['event Transfer(address indexed from, address indexed to, uint256 value)']);

let chain: LocalEvmChain;
let usdc: LocalUsdc;
let facilitator: BatchSettlementFacilitatorScheme;
let requirements: PaymentRequirements;

function walletOf(account: LocalAccount) {
  return createWalletClient({ account, chain: chain.chain, transport: localTransport(chain.rpcUrl) });
}

/** A payer: the unmodified client scheme with its own channel storage, depositing DEPOSIT at once. */
function payerClient(account: LocalAccount, options: { payerAuthorizer?: Address; salt?: Hex } = {}) {
  const storage = new InMemoryClientChannelStorage();
  const scheme = new BatchSettlementEvmScheme(toClientEvmSigner(account, chain.publicClient), {
    storage,
    depositStrategy: () => DEPOSIT,
    ...options,
  });
  return { account, storage, scheme };
}
type Payer = ReturnType<typeof payerClient>;

function envelope(payload: Record<string, unknown>): PaymentPayload {
  return { x402Version: 2, accepted: requirements, payload };
}

/**
 * One paid request as a server runs it: the client signs, the facilitator verifies (and settles a
 * deposit), and the charge is committed to the client's storage as its PAYMENT-RESPONSE would.
 */
async function pay(payer: Payer, charged: bigint) {
  const { payload } = await payer.scheme.createPaymentPayload(2, requirements);
  const verified = await facilitator.verify(envelope(payload), requirements);
  expect(verified).toMatchObject({ isValid: true, payer: payer.account.address });
  let transaction = '';
  if (payload.type === 'deposit') {
    const settled = await facilitator.settle(envelope(payload), requirements);
    expect(settled).toMatchObject({ success: true });
    transaction = settled.transaction;
  }
  const voucher = payload.voucher as { channelId: Hex; maxClaimableAmount: string; signature: Hex };
  await updateChannelFromSettle(payer.storage, {
    server: { chargedAmount: charged.toString() },
    local: {
      channelId: voucher.channelId,
      requestAmount: requirements.amount,
      ...(payload.type === 'deposit' ? { depositAmount: (payload.deposit as { amount: string }).amount } : {}),
    },
  });
  return { type: payload.type as string, voucher, config: payload.channelConfig as ChannelConfig, transaction };
}

interface ChannelConfig {
  payer: Address;
  payerAuthorizer: Address;
  receiver: Address;
  receiverAuthorizer: Address;
  token: Address;
  withdrawDelay: number;
  salt: Hex;
}

const toContractConfig = (config: ChannelConfig) => ({
  ...config,
  payer: getAddress(config.payer),
  payerAuthorizer: getAddress(config.payerAuthorizer),
  receiver: getAddress(config.receiver),
  receiverAuthorizer: getAddress(config.receiverAuthorizer),
  token: getAddress(config.token),
});

async function channelState(channelId: Hex) {
  const read = <T>(functionName: 'channels' | 'pendingWithdrawals' | 'refundNonce') =>
    chain.publicClient.readContract({
      address: BATCH_SETTLEMENT_ADDRESS,
      abi: batchSettlementAbi,
      functionName,
      args: [channelId],
    }) as Promise<T>;
  const [[balance, totalClaimed], [withdrawAmount, withdrawRequestedAt], refundNonce] = await Promise.all([
    read<readonly [bigint, bigint]>('channels'),
    read<readonly [bigint, number]>('pendingWithdrawals'),
    read<bigint>('refundNonce'),
  ]);
  return { balance, totalClaimed, withdrawAmount, withdrawRequestedAt, refundNonce };
}

async function receiptOf(hash: string) {
  return waitForSuccess(chain, hash as Hash);
}

beforeAll(async () => {
  chain = await startEvmChain(NETWORK, [
    { privateKey: PRIVATE_KEYS.minter, balanceWei: GAS },
    { privateKey: PRIVATE_KEYS.relayer, balanceWei: GAS },
    { privateKey: PRIVATE_KEYS.payerA, balanceWei: GAS },
    { privateKey: PRIVATE_KEYS.stranger, balanceWei: GAS },
  ]);
  const [installed] = await Promise.all([
    installUsdc(chain, minter, new KeyedQueue()),
    installPermit2(chain),
    installBatchSettlement(chain),
  ]);
  usdc = installed;
  await usdc.mint(payerA.address, 1_000_000n);
  await usdc.mint(payerB.address, 1_000_000n);

  const relayerWallet = walletOf(relayer);
  const publicClient = chain.publicClient;
  facilitator = new BatchSettlementFacilitatorScheme(
    toFacilitatorEvmSigner({
      address: relayer.address,
      readContract: (args) => publicClient.readContract({ ...args, account: relayer.address }),
      verifyTypedData: (args) =>
        publicClient.verifyTypedData(args as Parameters<typeof publicClient.verifyTypedData>[0]),
      writeContract: (args) => relayerWallet.writeContract({ ...args, account: relayer, chain: chain.chain } as never),
      sendTransaction: (args) => relayerWallet.sendTransaction({ ...args, account: relayer, chain: chain.chain }),
      waitForTransactionReceipt: (args) => publicClient.waitForTransactionReceipt(args),
      getCode: (args) => publicClient.getCode(args),
    }),
    toClientEvmSigner(receiverAuthorizer),
  );
  const { eip712 } = EVM_NETWORKS[NETWORK];
  requirements = {
    scheme: 'batch-settlement',
    network: CAIP2 as PaymentRequirements['network'],
    amount: PRICE.toString(),
    asset: usdc.address,
    payTo: receiver.address,
    maxTimeoutSeconds: 300,
    extra: {
      receiverAuthorizer: receiverAuthorizer.address,
      withdrawDelay: WITHDRAW_DELAY,
      name: eip712.name,
      version: eip712.version,
    },
  };
}, 60_000);

afterAll(async () => {
  await ifStarted(chain)?.close();
});

describe('x402 batch-settlement channels on a local chain', () => {
  it('the committed artifact is what contracts/BatchSettlement.sol compiles to', () => {
    expect(renderBatchSettlementArtifactModule(compileBatchSettlement())).toBe(
      renderBatchSettlementArtifactModule(batchSettlementArtifact as never),
    );
  });

  it('channel ids and the EIP-712 domain are those @x402/evm computes', async () => {
    const config: ChannelConfig = {
      payer: payerA.address,
      payerAuthorizer: payerA.address,
      receiver: receiver.address,
      receiverAuthorizer: receiverAuthorizer.address,
      token: usdc.address,
      withdrawDelay: WITHDRAW_DELAY,
      salt: `0x${'11'.repeat(32)}`,
    };
    const onChain = await chain.publicClient.readContract({
      address: BATCH_SETTLEMENT_ADDRESS,
      abi: batchSettlementAbi,
      functionName: 'getChannelId',
      args: [config],
    });
    expect(onChain).toBe(computeChannelId(config, CAIP2));
    const digest = await chain.publicClient.readContract({
      address: BATCH_SETTLEMENT_ADDRESS,
      abi: batchSettlementAbi,
      functionName: 'getVoucherDigest',
      args: [onChain, 5n],
    });
    expect(digest).toBe(
      hashTypedData({
        domain: {
          name: 'x402 Batch Settlement',
          version: '1',
          chainId: EVM_NETWORKS[NETWORK].chainId,
          verifyingContract: BATCH_SETTLEMENT_ADDRESS,
        },
        types: {
          Voucher: [
            { name: 'channelId', type: 'bytes32' },
            { name: 'maxClaimableAmount', type: 'uint128' },
          ],
        },
        primaryType: 'Voucher',
        message: { channelId: onChain, maxClaimableAmount: 5n },
      }),
    );
    expect(await chain.publicClient.getCode({ address: ERC3009_DEPOSIT_COLLECTOR_ADDRESS })).not.toBe('0x');
    expect(await chain.publicClient.getCode({ address: PERMIT2_DEPOSIT_COLLECTOR_ADDRESS })).not.toBe('0x');
  });

  it('a Permit2 deposit goes through the Permit2 collector, bound to its channel by the witness', async () => {
    // The payer approves Permit2 once on the token, as for any Permit2 payment.
    await receiptOf(
      await walletOf(payerA).writeContract({
        address: usdc.address,
        abi: parseAbi(['function approve(address spender, uint256 amount) returns (bool)']),
        functionName: 'approve',
        args: [PERMIT2_ADDRESS, maxUint256],
      }),
    );
    const permit2Requirements = {
      ...requirements,
      extra: { ...requirements.extra, assetTransferMethod: 'permit2' },
    };
    const { scheme } = payerClient(payerA, { salt: `0x${'02'.repeat(32)}` });
    const before = await usdc.balanceOf(payerA.address);
    const { payload } = await scheme.createPaymentPayload(2, permit2Requirements);
    expect(payload.type).toBe('deposit');
    const paid = { x402Version: 2, accepted: permit2Requirements, payload };
    expect(await facilitator.verify(paid, permit2Requirements)).toMatchObject({ isValid: true });
    const settled = await facilitator.settle(paid, permit2Requirements);
    expect(settled).toMatchObject({ success: true });
    const transfers = parseEventLogs({ abi: transferEvent, logs: (await receiptOf(settled.transaction)).logs });
    expect(transfers.map((log) => log.args)).toEqual([
      { from: payerA.address, to: BATCH_SETTLEMENT_ADDRESS, value: DEPOSIT },
    ]);
    expect(await usdc.balanceOf(payerA.address)).toBe(before - DEPOSIT);
    const channelId = (payload.voucher as { channelId: Hex }).channelId;
    expect(await channelState(channelId)).toMatchObject({ balance: DEPOSIT, totalClaimed: 0n });
    // The same authorization cannot fund the channel twice (Permit2's nonce is used up).
    expect(await facilitator.settle(paid, permit2Requirements)).toMatchObject({ success: false });
    expect(await channelState(channelId)).toMatchObject({ balance: DEPOSIT });
  });

  it('a smart-wallet payer without a payer authorizer signs vouchers checked through ERC-1271', async () => {
    const wallet = await createSmartWallet(await deployWalletFactory(chain));
    await usdc.mint(wallet.address, DEPOSIT);
    const payer = payerClient(wallet.account(), { payerAuthorizer: zeroAddress });
    const first = await pay(payer, PRICE);
    expect(first.type).toBe('deposit');
    expect(first.config.payerAuthorizer).toBe(zeroAddress);
    const second = await pay(payer, PRICE);
    expect(second.type).toBe('voucher');
    const claim = await facilitator.settle(
      envelope({
        type: 'claim',
        claims: [
          {
            voucher: { channel: second.config, maxClaimableAmount: second.voucher.maxClaimableAmount },
            signature: second.voucher.signature,
            totalClaimed: (2n * PRICE).toString(),
          },
        ],
      }),
      requirements,
    );
    expect(claim).toMatchObject({ success: true });
    expect(await channelState(second.voucher.channelId)).toMatchObject({ balance: DEPOSIT, totalClaimed: 2n * PRICE });
    const settle = await facilitator.settle(
      envelope({ type: 'settle', receiver: receiver.address, token: usdc.address }),
      requirements,
    );
    expect(settle).toMatchObject({ success: true, amount: (2n * PRICE).toString() });
    // Signed in the wallet's encoding by a key that is not its owner: the wallet refuses it.
    const forged = await signVoucher(
      toClientEvmSigner(wallet.account({ signer: stranger })),
      second.voucher.channelId,
      (3n * PRICE).toString(),
      CAIP2,
    );
    await expect(
      chain.publicClient.simulateContract({
        account: receiver.address,
        address: BATCH_SETTLEMENT_ADDRESS,
        abi: batchSettlementAbi,
        functionName: 'claim',
        args: [
          [
            {
              voucher: { channel: toContractConfig(second.config), maxClaimableAmount: 3n * PRICE },
              signature: forged.signature,
              totalClaimed: 3n * PRICE,
            },
          ],
        ],
      }),
    ).rejects.toThrow(/InvalidVoucherSignature/);
  });

  it('deposits, vouchers, one claim over two channels, one settle, a refund and a withdrawal move exact money', async () => {
    const a = payerClient(payerA);
    const b = payerClient(payerB);
    const start = {
      a: await usdc.balanceOf(payerA.address),
      b: await usdc.balanceOf(payerB.address),
      receiver: await usdc.balanceOf(receiver.address),
      contract: await usdc.balanceOf(BATCH_SETTLEMENT_ADDRESS),
    };

    // Channel A: an ERC-3009 deposit carrying the first voucher, then two vouchers (one charged
    // below its ceiling, as dynamic pricing does).
    const a1 = await pay(a, PRICE);
    expect(a1.type).toBe('deposit');
    const depositLogs = parseEventLogs({
      abi: batchSettlementAbi,
      logs: (await receiptOf(a1.transaction)).logs,
    });
    expect(depositLogs.map((log) => log.eventName)).toEqual(['ChannelCreated', 'Deposited']);
    expect(await usdc.balanceOf(payerA.address)).toBe(start.a - DEPOSIT);
    const a2 = await pay(a, 400n);
    const a3 = await pay(a, PRICE);
    expect([a2.type, a3.type]).toEqual(['voucher', 'voucher']);
    expect(a3.voucher.maxClaimableAmount).toBe(String(PRICE + 400n + PRICE));
    const chargedA = PRICE + 400n + PRICE;

    // Channel B: a deposit and one voucher.
    const b1 = await pay(b, PRICE);
    const b2 = await pay(b, 700n);
    expect([b1.type, b2.type]).toEqual(['deposit', 'voucher']);
    const chargedB = PRICE + 700n;
    const idA = a1.voucher.channelId;
    const idB = b1.voucher.channelId;
    expect(await channelState(idA)).toMatchObject({ balance: DEPOSIT, totalClaimed: 0n });
    expect(await channelState(idB)).toMatchObject({ balance: DEPOSIT, totalClaimed: 0n });

    // One claim transaction covers both channels (the facilitator signs as receiver authorizer);
    // no token moves.
    const claim = await facilitator.settle(
      envelope({
        type: 'claim',
        claims: [
          {
            voucher: { channel: a3.config, maxClaimableAmount: a3.voucher.maxClaimableAmount },
            signature: a3.voucher.signature,
            totalClaimed: chargedA.toString(),
          },
          {
            voucher: { channel: b2.config, maxClaimableAmount: b2.voucher.maxClaimableAmount },
            signature: b2.voucher.signature,
            totalClaimed: chargedB.toString(),
          },
        ],
      }),
      requirements,
    );
    expect(claim).toMatchObject({ success: true });
    const claimLogs = (await receiptOf(claim.transaction)).logs;
    expect(parseEventLogs({ abi: batchSettlementAbi, eventName: 'Claimed', logs: claimLogs })).toHaveLength(2);
    expect(parseEventLogs({ abi: transferEvent, logs: claimLogs })).toHaveLength(0);
    expect(await channelState(idA)).toMatchObject({ balance: DEPOSIT, totalClaimed: chargedA });
    expect(await channelState(idB)).toMatchObject({ balance: DEPOSIT, totalClaimed: chargedB });

    // One settle moves the claimed total to the receiver in one transfer.
    const settle = await facilitator.settle(
      envelope({ type: 'settle', receiver: receiver.address, token: usdc.address }),
      requirements,
    );
    expect(settle).toMatchObject({ success: true, amount: (chargedA + chargedB).toString() });
    const transfers = parseEventLogs({ abi: transferEvent, logs: (await receiptOf(settle.transaction)).logs });
    expect(transfers).toHaveLength(1);
    expect(transfers[0]!.args).toMatchObject({ to: receiver.address, value: chargedA + chargedB });
    expect(await usdc.balanceOf(receiver.address)).toBe(start.receiver + chargedA + chargedB);
    const nothing = await facilitator.settle(
      envelope({ type: 'settle', receiver: receiver.address, token: usdc.address }),
      requirements,
    );
    expect(nothing).toMatchObject({ success: false, errorReason: 'invalid_batch_settlement_evm_nothing_to_settle' });

    // A cooperative refund of part of channel B: a zero-charge voucher from the payer, the
    // receiver authorizer's signature over the channel's refund nonce.
    const zeroCharge = await signVoucher(toClientEvmSigner(payerB), idB, chargedB.toString(), CAIP2);
    const refundPayload = envelope({
      type: 'refund',
      channelConfig: b2.config,
      voucher: zeroCharge,
      amount: '30000',
      refundNonce: '0',
      // The server's claim of its latest voucher rides along (the facilitator then sends the claim
      // and the refund through the contract's multicall); here it is already claimed: a no-op.
      claims: [
        {
          voucher: { channel: b2.config, maxClaimableAmount: b2.voucher.maxClaimableAmount },
          signature: b2.voucher.signature,
          totalClaimed: chargedB.toString(),
        },
      ],
    });
    expect(await facilitator.verify(refundPayload, requirements)).toMatchObject({ isValid: true });
    const refund = await facilitator.settle(refundPayload, requirements);
    expect(refund).toMatchObject({ success: true, amount: '30000' });
    const refundLogs = parseEventLogs({ abi: batchSettlementAbi, logs: (await receiptOf(refund.transaction)).logs });
    expect(refundLogs.map((log) => log.eventName)).toEqual(['Refunded']);
    expect(await usdc.balanceOf(payerB.address)).toBe(start.b - DEPOSIT + 30_000n);
    expect(await channelState(idB)).toMatchObject({
      balance: DEPOSIT - 30_000n,
      totalClaimed: chargedB,
      refundNonce: 1n,
    });
    // The same refund signature cannot be used twice: the nonce has moved on.
    const replay = await facilitator.settle(refundPayload, requirements);
    expect(replay).toMatchObject({ success: false });

    // A voucher signed by a key other than the payer authorizer: refused by the facilitator and by
    // the contract.
    const forged = await signVoucher(toClientEvmSigner(stranger), idA, (chargedA + 5_000n).toString(), CAIP2);
    expect(
      await facilitator.verify(envelope({ type: 'voucher', channelConfig: a3.config, voucher: forged }), requirements),
    ).toMatchObject({ isValid: false, invalidReason: 'invalid_batch_settlement_evm_voucher_signature' });
    await expect(
      chain.publicClient.simulateContract({
        account: receiver.address,
        address: BATCH_SETTLEMENT_ADDRESS,
        abi: batchSettlementAbi,
        functionName: 'claim',
        args: [
          [
            {
              voucher: { channel: toContractConfig(a3.config), maxClaimableAmount: chargedA + 5_000n },
              signature: forged.signature,
              totalClaimed: chargedA + 5_000n,
            },
          ],
        ],
      }),
    ).rejects.toThrow(/InvalidVoucherSignature/);

    // A timed withdrawal of channel A: the payer starts it for all its unclaimed escrow; a voucher
    // served before is claimed during the delay; after the delay the payer gets what is unclaimed.
    const a4 = await pay(a, PRICE);
    const chargedA4 = chargedA + PRICE;
    const payerAWallet = walletOf(payerA);
    const configA = toContractConfig(a4.config);
    await receiptOf(
      await payerAWallet.writeContract({
        address: BATCH_SETTLEMENT_ADDRESS,
        abi: batchSettlementAbi,
        functionName: 'initiateWithdraw',
        args: [configA, DEPOSIT - chargedA],
      }),
    );
    const pending = await channelState(idA);
    expect(pending.withdrawAmount).toBe(DEPOSIT - chargedA);
    expect(pending.withdrawRequestedAt).toBeGreaterThan(0);
    await expect(
      chain.publicClient.simulateContract({
        account: payerA.address,
        address: BATCH_SETTLEMENT_ADDRESS,
        abi: batchSettlementAbi,
        functionName: 'finalizeWithdraw',
        args: [configA],
      }),
    ).rejects.toThrow(/WithdrawDelayNotElapsed/);
    const lateClaim = await facilitator.settle(
      envelope({
        type: 'claim',
        claims: [
          {
            voucher: { channel: a4.config, maxClaimableAmount: a4.voucher.maxClaimableAmount },
            signature: a4.voucher.signature,
            totalClaimed: chargedA4.toString(),
          },
        ],
      }),
      requirements,
    );
    expect(lateClaim).toMatchObject({ success: true });
    const testClient = createTestClient({
      mode: 'hardhat',
      chain: chain.chain,
      transport: localTransport(chain.rpcUrl),
    });
    await testClient.increaseTime({ seconds: WITHDRAW_DELAY });
    await testClient.mine({ blocks: 1 });
    const finalize = await payerAWallet.writeContract({
      address: BATCH_SETTLEMENT_ADDRESS,
      abi: batchSettlementAbi,
      functionName: 'finalizeWithdraw',
      args: [configA],
    });
    const finalizeLogs = parseEventLogs({ abi: batchSettlementAbi, logs: (await receiptOf(finalize)).logs });
    expect(finalizeLogs.map((log) => log.eventName)).toEqual(['WithdrawFinalized']);
    expect(await usdc.balanceOf(payerA.address)).toBe(start.a - chargedA4);
    expect(await channelState(idA)).toMatchObject({
      balance: chargedA4,
      totalClaimed: chargedA4,
      withdrawAmount: 0n,
      withdrawRequestedAt: 0,
    });

    // What the contract still holds is exactly what is owed: channel B's unclaimed escrow and
    // channel A's last claim, not yet settled.
    expect(await usdc.balanceOf(BATCH_SETTLEMENT_ADDRESS)).toBe(start.contract + DEPOSIT - 30_000n - chargedB + PRICE);
  });
});
