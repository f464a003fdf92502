// `npm run sandbox:pay` against a real sandbox (the peers of `npm start` and the service started
// with the sandbox's configuration): a relay call to the target of every network is paid on that
// target's own network with the sandbox's client wallet of that chain type, and the chain shows
// exactly the price plus the fee leaving the client, the price reaching the target, the fee staying
// with the service. It says "paid" only once the client's balance shows the payment: paying the same
// Solana target twice moves the money twice, and an answer the service kept from an earlier call
// (nothing moved) is reported as not paid. Through a batch-settlement channel (relay-channel), the
// first run deposits (the client's balance falls by the deposit) and a later run, with a new client
// reading the channel from the file the first one left in DATA_DIR, sends one voucher only: no
// tokens move, and the channel is charged the price plus the 3% fee.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { createSolanaRpc, type Address as SolanaAddress, type Signature } from '@solana/kit';
import { findAssociatedTokenPda, TOKEN_PROGRAM_ADDRESS } from '@solana-program/token';
import { decodePaymentRequiredHeader } from '@x402/core/http';
import { pino } from 'pino';
import { createPublicClient, getAddress, parseAbi, type Hash, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHANNELS_FILE } from '../../devnet/channelStorage';
import { BATCH_SETTLEMENT_ADDRESS, batchSettlementAbi } from '../../devnet/evm/batch-settlement';
import { localTransport } from '../../devnet/evm/chain';
import {
  EVM_NETWORKS,
  isEvmNetwork,
  NETWORK_NAMES,
  SOLANA_NETWORKS,
  type NetworkName,
  type SolanaNetworkName,
} from '../../devnet/networks';
import { startSandbox, type LocalSandbox, type SandboxState } from '../../devnet/sandbox';
import {
  channelPaymentSeen,
  describeResult,
  parseCommand,
  paymentSeen,
  sandboxPay,
  sandboxTargetNetwork,
} from '../../devnet/sandboxPay';
import { SLOT_DURATION_MS } from '../../devnet/svm/ledger';
import { solanaKeyFromSecret } from '../../devnet/svm/keys';
import { decodePaymentResponseHeader, type PaymentRequiredBody } from '../../devnet/x402';
import { contractFetch } from '../support/relay';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const dataDir = mkdtempSync(path.join(path.resolve('.tmp'), 'sandbox-pay-'));
const balanceOfAbi = parseAbi(['function balanceOf(address owner) view returns (uint256)']);

let sandbox: LocalSandbox;
let t: TestService;
let state: SandboxState;
let service: { evm: string; solana: string };

beforeAll(async () => {
  sandbox = await startSandbox({ dataDir, reset: false, log: pino({ level: 'silent' }), env: {}, print: () => {} });
  t = await startTestService(sandbox.env);
  state = await sandbox.ready(t.service.url, t.database.handle.db);
  service = {
    evm: privateKeyToAccount(sandbox.env.EVM_PRIVATE_KEY as Hex).address,
    solana: (await solanaKeyFromSecret(Uint8Array.from(JSON.parse(sandbox.env.SOLANA_PRIVATE_KEY!)))).address,
  };
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(sandbox)?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

/** USDC of an owner as the chain holds it, read over the sandbox's RPC URL. */
async function usdcBalance(network: NetworkName, owner: string): Promise<bigint> {
  if (isEvmNetwork(network)) {
    const client = createPublicClient({ transport: localTransport(state.rpc[network]!) });
    return client.readContract({
      address: EVM_NETWORKS[network].usdc,
      abi: balanceOfAbi,
      functionName: 'balanceOf',
      args: [getAddress(owner)],
    });
  }
  const [account] = await findAssociatedTokenPda({
    mint: SOLANA_NETWORKS[network].usdc as SolanaAddress,
    owner: owner as SolanaAddress,
    tokenProgram: TOKEN_PROGRAM_ADDRESS,
  });
  const { value } = await createSolanaRpc(state.rpc[network]!).getTokenAccountBalance(account).send();
  return BigInt(value.amount);
}

/** Whether the transaction is on chain and succeeded. */
async function confirmed(network: NetworkName, transaction: string): Promise<boolean> {
  if (isEvmNetwork(network)) {
    const client = createPublicClient({ transport: localTransport(state.rpc[network]!) });
    return (await client.getTransactionReceipt({ hash: transaction as Hash })).status === 'success';
  }
  const { value } = await createSolanaRpc(state.rpc[network]!)
    .getSignatureStatuses([transaction as Signature])
    .send();
  return value[0]?.err === null;
}

/**
 * Waits (bounded) until the cluster is past the slot `transaction` landed in: a client paying again
 * later signs with a newer blockhash than that transaction's.
 */
async function pastSlotOf(network: SolanaNetworkName, transaction: string): Promise<void> {
  const rpc = createSolanaRpc(state.rpc[network]!);
  const { value } = await rpc.getSignatureStatuses([transaction as Signature]).send();
  await pastSlot(network, value[0]!.slot);
}

/** Waits (bounded) until the cluster is past `slot`: a payment signed then has a newer blockhash. */
async function pastSlot(network: SolanaNetworkName, slot: bigint): Promise<void> {
  const rpc = createSolanaRpc(state.rpc[network]!);
  const deadline = Date.now() + 50 * SLOT_DURATION_MS;
  while ((await rpc.getSlot().send()) <= slot) {
    if (Date.now() > deadline) throw new Error(`${network} stayed at slot ${slot}`);
    await new Promise((resolve) => setTimeout(resolve, SLOT_DURATION_MS / 4));
  }
}

/**
 * contractFetch, but every X-PAYMENT it sends is the first one it sent: a client that pays with the
 * same payment again. The service answers such a repeat from what it kept, and moves no money.
 */
function firstPaymentAgainFetch(): typeof fetch {
  const inner = contractFetch();
  let first: string | undefined;
  return (input, init) => {
    const headers = new Headers(init?.headers);
    const payment = headers.get('x-payment');
    if (payment !== null) {
      first ??= payment;
      headers.set('x-payment', first);
    }
    return inner(input, { ...init, headers });
  };
}

/** The target's own 402: its price and where it is paid. */
async function targetOffer(targetUrl: string) {
  const response = await fetch(targetUrl);
  expect(response.status).toBe(402);
  const [offer] = ((await response.json()) as PaymentRequiredBody).accepts;
  return { payTo: offer!.payTo, price: BigInt(offer!.maxAmountRequired) };
}

describe('sandbox:pay relay', () => {
  it.each(NETWORK_NAMES)(
    'pays the %s target on its own network with the client wallet of that chain; the chain moves exactly',
    async (network) => {
      const targetUrl = `${state.targets[network]}/paid`;
      expect(sandboxTargetNetwork(state, targetUrl)).toBe(network);
      const { payTo, price } = await targetOffer(targetUrl);
      const payer = isEvmNetwork(network) ? getAddress(state.client.evmAddress) : state.client.solanaAddress;
      const ours = isEvmNetwork(network) ? service.evm : service.solana;
      const before = {
        client: await usdcBalance(network, payer),
        service: await usdcBalance(network, ours),
        target: await usdcBalance(network, payTo),
      };

      const result = await sandboxPay(state, { mode: 'relay', targetUrl }, contractFetch());

      expect(result.status, result.text).toBe(200);
      const total = (price * 103n + 99n) / 100n;
      expect(result.paid).toMatchObject({ network, amountMicroUsdc: total, payer });
      expect(result.paid!.transaction).toBe(result.headers.get('x-client-payment'));
      expect(await confirmed(network, result.paid!.transaction!)).toBe(true);
      expect(result.targetPayment).toMatchObject({ success: true, network });
      expect(await confirmed(network, result.targetPayment!.transaction)).toBe(true);
      expect(decodePaymentResponseHeader(result.headers.get('x-payment-response')!).transaction).toBe(
        result.targetPayment!.transaction,
      );

      expect(await usdcBalance(network, payer)).toBe(before.client - total);
      expect(await usdcBalance(network, payTo)).toBe(before.target + price);
      expect(await usdcBalance(network, ours)).toBe(before.service + total - price);
      expect(result.paid!.clientBalance).toEqual({ before: before.client, after: before.client - total });
      expect(paymentSeen(result.paid!)).toBe(true);

      const printed = describeResult(result);
      expect(printed).toContain('HTTP 200');
      expect(printed).toMatch(/^paid /m);
      expect(printed).toContain(
        `(${total} micro-USDC) on ${network} from ${payer}, transaction ${result.paid!.transaction}`,
      );
    },
  );

  it.each(['solana', 'solana-devnet'] as const)(
    'pays the same %s target twice: two transactions, the money moved twice, "paid" printed twice',
    async (network) => {
      const targetUrl = `${state.targets[network]}/paid`;
      const { payTo, price } = await targetOffer(targetUrl);
      const payer = state.client.solanaAddress;
      const total = (price * 103n + 99n) / 100n;
      const before = { client: await usdcBalance(network, payer), target: await usdcBalance(network, payTo) };
      // An earlier test may have paid this very target moments ago: sign the first payment in a later slot.
      await pastSlot(network, await createSolanaRpc(state.rpc[network]!).getSlot().send());

      const first = await sandboxPay(state, { mode: 'relay', targetUrl }, contractFetch());
      expect(first.status, first.text).toBe(200);
      await pastSlotOf(network, first.paid!.transaction!);
      const second = await sandboxPay(state, { mode: 'relay', targetUrl }, contractFetch());
      expect(second.status, second.text).toBe(200);

      expect(second.headers.get('idempotent-replayed')).toBeNull();
      expect(second.paid!.transaction).not.toBe(first.paid!.transaction);
      expect(second.targetPayment!.transaction).not.toBe(first.targetPayment!.transaction);
      for (const transaction of [first, second].flatMap((result) => [
        result.paid!.transaction!,
        result.targetPayment!.transaction,
      ]))
        expect(await confirmed(network, transaction)).toBe(true);
      expect([first.paid!.clientBalance, second.paid!.clientBalance]).toEqual([
        { before: before.client, after: before.client - total },
        { before: before.client - total, after: before.client - 2n * total },
      ]);
      expect(await usdcBalance(network, payer)).toBe(before.client - 2n * total);
      expect(await usdcBalance(network, payTo)).toBe(before.target + 2n * price);
      for (const result of [first, second]) expect(describeResult(result)).toMatch(/^paid /m);
    },
  );

  it.each(['base-sepolia', 'solana-devnet'] as const)(
    'on %s, says nothing was paid when the service answers from what it kept and the balance does not move',
    async (network) => {
      const targetUrl = `${state.targets[network]}/paid`;
      const payer = isEvmNetwork(network) ? getAddress(state.client.evmAddress) : state.client.solanaAddress;
      const repeating = firstPaymentAgainFetch();
      const paid = await sandboxPay(state, { mode: 'relay', targetUrl }, repeating);
      expect(paid.status, paid.text).toBe(200);
      expect(paymentSeen(paid.paid!)).toBe(true);
      const balance = await usdcBalance(network, payer);

      // The same request with the same payment: the first call's answer again, and no money moves.
      const again = await sandboxPay(state, { mode: 'relay', targetUrl }, repeating, { paymentSeenTimeoutMs: 2_000 });
      expect(again.status, again.text).toBe(200);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.paid!.transaction).toBe(paid.paid!.transaction);
      expect(again.paid!.clientBalance).toEqual({ before: balance, after: balance });
      expect(await usdcBalance(network, payer)).toBe(balance);
      expect(paymentSeen(again.paid!)).toBe(false);
      const printed = describeResult(again);
      expect(printed).not.toMatch(/^paid /m);
      expect(printed).toContain(`NOT PAID: the client's balance on ${network} did not change`);
      expect(printed).toContain('nothing was paid');
    },
  );

  it('pays the first offer it can for a URL that is not one of the sandbox targets (the chat), and proxy calls charge credits', async () => {
    const chat = await sandboxPay(state, { mode: 'chat', message: 'hello' }, contractFetch());
    expect(chat.status, chat.text).toBe(200);
    expect(chat.paid).toMatchObject({ network: 'base', payer: getAddress(state.client.evmAddress) });
    expect(await confirmed('base', chat.paid!.transaction!)).toBe(true);

    const proxy = await sandboxPay(
      state,
      { mode: 'proxy', targetUrl: `${state.targets['solana-devnet']}/paid` },
      contractFetch(),
    );
    expect(proxy.status, proxy.text).toBe(200);
    expect(proxy.paid).toBeUndefined();
    expect(proxy.targetPayment).toMatchObject({ success: true, network: 'solana-devnet' });
  });

  it('reads its command line', () => {
    expect(parseCommand(['relay', 'http://127.0.0.1:1/paid'])).toEqual({
      mode: 'relay',
      targetUrl: 'http://127.0.0.1:1/paid',
    });
    expect(parseCommand(['chat', 'two', 'words'])).toEqual({ mode: 'chat', message: 'two words' });
    expect(parseCommand(['relay-channel', 'http://127.0.0.1:1/paid'])).toEqual({
      mode: 'relay-channel',
      targetUrl: 'http://127.0.0.1:1/paid',
    });
    expect(parseCommand(['relay'])).toBeUndefined();
    expect(parseCommand(['relay-channel'])).toBeUndefined();
    expect(parseCommand(['pay', 'x'])).toBeUndefined();
  });
});

/** contractFetch, counting the requests that carry a payment (PAYMENT-SIGNATURE). */
function countingFetch(): { fetch: typeof fetch; payments: () => number } {
  const inner = contractFetch();
  let payments = 0;
  return {
    fetch: (input, init) => {
      const request = new Request(input, init);
      if (request.headers.has('payment-signature')) payments++;
      return inner(request);
    },
    payments: () => payments,
  };
}

describe('sandbox:pay relay-channel', () => {
  const network = 'base-sepolia';

  async function channelOnChain(channelId: Hex) {
    const [balance, totalClaimed] = await createPublicClient({
      transport: localTransport(state.rpc[network]!),
    }).readContract({
      address: BATCH_SETTLEMENT_ADDRESS,
      abi: batchSettlementAbi,
      functionName: 'channels',
      args: [channelId],
    });
    return { balance, totalClaimed };
  }

  it('pays /relay from a channel: the first run deposits, the next one sends a voucher only and moves no tokens', async () => {
    const targetUrl = `${state.targets[network]}/paid`;
    const { payTo, price } = await targetOffer(targetUrl);
    const total = (price * 103n + 99n) / 100n;
    const payer = getAddress(state.client.evmAddress);
    expect(state.channelNetworks).toContain(network);

    // The sandbox's service offers a channel beside exact, with the minimum first deposit the client will make.
    const unpaid = await contractFetch()(`${state.baseUrl}/relay`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ api_url: targetUrl, method: 'GET', network }),
    });
    expect(unpaid.status).toBe(402);
    const offer = decodePaymentRequiredHeader(unpaid.headers.get('payment-required')!).accepts.find(
      (entry) => entry.scheme === 'batch-settlement',
    );
    expect(offer).toMatchObject({ network: 'eip155:84532', amount: total.toString(), payTo: service.evm });
    const minDeposit = BigInt((offer!.extra as { minDeposit: string }).minDeposit);
    expect(minDeposit).toBeGreaterThan(total);

    const before = { client: await usdcBalance(network, payer), target: await usdcBalance(network, payTo) };
    const firstRun = countingFetch();
    const first = await sandboxPay(state, { mode: 'relay-channel', targetUrl }, firstRun.fetch, { dataDir });
    expect(first.status, first.text).toBe(200);
    expect(firstRun.payments()).toBe(1);
    const deposited = first.channel!;
    expect(deposited).toMatchObject({
      network,
      payer,
      deposit: { amountMicroUsdc: minDeposit },
      chargedMicroUsdc: total,
      clientBalance: { before: before.client, after: before.client - minDeposit },
    });
    expect(await confirmed(network, deposited.deposit!.transaction)).toBe(true);
    expect(await usdcBalance(network, payer)).toBe(before.client - minDeposit);
    const { channelId } = deposited.channelState;
    expect(deposited.channelState.chargedCumulativeAmount).toBe(total.toString());
    expect(await channelOnChain(channelId)).toEqual({ balance: minDeposit, totalClaimed: 0n });
    expect(deposited.onChain).toEqual({ balance: minDeposit, totalClaimed: 0n });
    expect(channelPaymentSeen(deposited)).toBe(true);
    expect(describeResult(first)).toMatch(
      new RegExp(`^deposited .* \\(${minDeposit} micro-USDC\\) into a channel on ${network} from ${payer}`, 'm'),
    );
    // The client's channel is in DATA_DIR, for the next run.
    const file = path.join(dataDir, CHANNELS_FILE);
    expect(existsSync(file)).toBe(true);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toMatchObject({
      sandboxRunId: state.runId,
      channels: { [channelId.toLowerCase()]: { chargedCumulativeAmount: total.toString() } },
    });

    // A second run: a new client, which knows the channel only from that file. One paid request, a voucher.
    const secondRun = countingFetch();
    const second = await sandboxPay(state, { mode: 'relay-channel', targetUrl }, secondRun.fetch, { dataDir });
    expect(second.status, second.text).toBe(200);
    expect(secondRun.payments()).toBe(1);
    const voucher = second.channel!;
    expect(voucher.deposit).toBeUndefined();
    expect(voucher).toMatchObject({
      network,
      chargedMicroUsdc: total,
      clientBalance: { before: before.client - minDeposit, after: before.client - minDeposit },
      onChain: { balance: minDeposit, totalClaimed: 0n },
    });
    expect(voucher.channelState).toMatchObject({ channelId, chargedCumulativeAmount: (2n * total).toString() });
    expect(await usdcBalance(network, payer)).toBe(before.client - minDeposit);
    expect(await channelOnChain(channelId)).toEqual({ balance: minDeposit, totalClaimed: 0n });
    expect(channelPaymentSeen(voucher)).toBe(true);
    const printed = describeResult(second);
    expect(printed).toContain(`paid by voucher: no tokens moved (the client's balance on ${network} stays`);
    expect(printed).toContain(` USDC (${total} micro-USDC) on channel ${channelId}`);
    expect(printed).toContain(`the channel on chain: balance ${minDeposit} micro-USDC, claimed 0`);

    // The service paid the target from its own wallet each time.
    for (const result of [first, second]) {
      expect(result.targetPayment).toMatchObject({ success: true, network });
      expect(await confirmed(network, result.targetPayment!.transaction)).toBe(true);
    }
    expect(await usdcBalance(network, payTo)).toBe(before.target + 2n * price);
  });
});
