/**
 * `npm run sandbox:pay -- relay|relay-channel|proxy <target url>` or `-- chat <message>`: a paid call
 * through the running sandbox, as a client would make it, with the sandbox's funded client wallets.
 * Reads DATA_DIR/sandbox.json.
 *
 * relay and chat read the service's 402 and pay one of its offers: for relay the offer on the
 * target's own network (the sandbox knows which network each of its targets is on), else the first
 * one this client can pay. EVM payments go through the unmodified x402-fetch where x402 1.2.0
 * knows the network, through our own EIP-3009 signer where it does not (skale-base); Solana
 * payments through our Solana payer. proxy uses the demo API key; the service wallet pays.
 *
 * relay-channel pays /relay through an x402 v2 batch-settlement channel with the unmodified
 * @x402/fetch and @x402/evm's BatchSettlementEvmScheme client (its default deposit policy, and
 * @x402/core's default spend controls: at most $1 a payment). The client's channel state is kept in
 * DATA_DIR/sandbox-channels.json (devnet/channelStorage.ts), so the first run deposits and the next
 * ones send a voucher only.
 *
 * A payment counts as made only once the chain shows it: the client's USDC balance on the paid
 * network is read before the call and again after it, until it went down by the amount (for at
 * most PAYMENT_SEEN_TIMEOUT_MS). A service answer alone (a transaction named in a kept answer, say)
 * is not proof that money moved. Through a channel, a deposit is seen when the client's balance
 * went down by the deposit; a voucher moves no tokens, and is seen when the client's balance did not
 * move and the channel's balance on chain covers everything charged on it so far.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { createSolanaRpc, getBase64Encoder, type Address as SolanaAddress } from '@solana/kit';
import { findAssociatedTokenPda, getTokenDecoder, TOKEN_PROGRAM_ADDRESS } from '@solana-program/token';
import { x402Client } from '@x402/core/client';
import {
  decodePaymentRequiredHeader,
  decodePaymentResponseHeader as decodePaymentResponseHeaderV2,
} from '@x402/core/http';
import { toClientEvmSigner } from '@x402/evm';
import { BatchSettlementEvmScheme } from '@x402/evm/batch-settlement/client';
import { wrapFetchWithPayment as wrapFetchWithPaymentV2 } from '@x402/fetch';
import { createPublicClient, createWalletClient, defineChain, getAddress, parseAbi, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { SupportedEVMNetworks } from 'x402/types';
import { wrapFetchWithPayment } from 'x402-fetch';
import { CHANNELS_FILE, SandboxChannelStorage } from './channelStorage';
import { BATCH_SETTLEMENT_ADDRESS, batchSettlementAbi } from './evm/batch-settlement';
import type { ChannelStateExtra } from '../payments/incoming/channels/receive';
import { localTransport } from './evm/chain';
import { signEvmPayment } from './evm/authorization';
import {
  EVM_NETWORKS,
  isEvmNetwork,
  isSolanaNetwork,
  SOLANA_NETWORKS,
  atomicAmount,
  CAIP2_NETWORKS,
  networkOfCaip2,
  type EvmNetworkName,
  type NetworkName,
  type SolanaNetworkName,
} from './networks';
import type { SandboxState } from './sandbox';
import { solanaKeyFromSecret } from './svm/keys';
import { wrapFetchWithSolanaPayment } from './svm/payment-client';
import {
  decodePaymentResponseHeader,
  type PaymentRequiredBody,
  type PaymentRequirements,
  type SettleResponse,
} from './x402';

/** The most one sandbox call may cost: 1 USDC. */
const MAX_PAYMENT_MICRO_USDC = 1_000_000n;
/** How long a paid call waits, at most, for the client's balance to show the payment. */
export const PAYMENT_SEEN_TIMEOUT_MS = 10_000;
const BALANCE_POLL_MS = 100;
const balanceOfAbi = parseAbi(['function balanceOf(address owner) view returns (uint256)']);

const BATCH_SETTLEMENT = 'batch-settlement';

export type SandboxCommand =
  | { mode: 'relay'; targetUrl: string }
  | { mode: 'relay-channel'; targetUrl: string }
  | { mode: 'proxy'; targetUrl: string }
  | { mode: 'chat'; message: string };

/** A relay call paid through a batch-settlement channel, and what the chain shows of it. */
export interface ChannelPayment {
  network: EvmNetworkName;
  payer: string;
  /** Set when this call deposited (a first deposit or a top-up): the deposit's transaction and amount. */
  deposit?: { transaction: string; amountMicroUsdc: bigint };
  /** What this call was charged on the channel (PAYMENT-RESPONSE extra.chargedAmount). */
  chargedMicroUsdc: bigint;
  channelState: ChannelStateExtra;
  /** The payer's USDC before and after the call: down by the deposit, or unchanged for a voucher. */
  clientBalance: { before: bigint; after: bigint };
  /** The channel as the contract holds it after the call. */
  onChain: { balance: bigint; totalClaimed: bigint };
}

export interface SandboxPayResult {
  status: number;
  headers: Headers;
  text: string;
  /** What the client wallet paid the service (relay, chat); absent when nothing was asked. */
  paid?: {
    network: NetworkName;
    amountMicroUsdc: bigint;
    payer: string;
    /** The settled transaction the service named (X-Client-Payment of a relay, X-PAYMENT-RESPONSE of a chat). */
    transaction?: string;
    /**
     * The payer's USDC on `network` before the call, and after it: once it went down by the amount,
     * or as it was when the wait ended. Only a fall by exactly the amount is a payment (paymentSeen).
     */
    clientBalance: { before: bigint; after: bigint };
  };
  /** What the client paid through a channel (relay-channel); absent when the service took no payment. */
  channel?: ChannelPayment;
  /** The service's payment to the target (relay, proxy), from X-PAYMENT-RESPONSE. */
  targetPayment?: SettleResponse;
}

/** Networks this client holds a wallet and an RPC URL for. */
function canPay(state: SandboxState, network: string): network is NetworkName {
  return (isEvmNetwork(network) || isSolanaNetwork(network)) && state.rpc[network] !== undefined;
}

/** The network of the sandbox target that serves this URL, when it is one of the sandbox's. */
export function sandboxTargetNetwork(state: SandboxState, targetUrl: string): NetworkName | undefined {
  let origin: string;
  try {
    origin = new URL(targetUrl).origin;
  } catch {
    return undefined;
  }
  const name = Object.entries(state.targets).find(([, url]) => new URL(url).origin === origin)?.[0];
  if (name === undefined) return undefined;
  // sandbox.json names every target's network; a state written before it did named targets after their networks.
  const network: string = (state.targetDetails as SandboxState['targetDetails'] | undefined)?.[name]?.network ?? name;
  return isEvmNetwork(network) || isSolanaNetwork(network) ? network : undefined;
}

function payerOf(state: SandboxState, network: NetworkName): string {
  return isEvmNetwork(network) ? getAddress(state.client.evmAddress) : state.client.solanaAddress;
}

/** The client's USDC on `network`, read from the chain over the sandbox's RPC URL (0 without a token account). */
async function clientUsdc(state: SandboxState, network: NetworkName): Promise<bigint> {
  const rpcUrl = state.rpc[network];
  if (rpcUrl === undefined) throw new Error(`the sandbox state has no RPC URL for ${network}`);
  if (isEvmNetwork(network)) {
    return createPublicClient({ transport: localTransport(rpcUrl) }).readContract({
      address: EVM_NETWORKS[network].usdc,
      abi: balanceOfAbi,
      functionName: 'balanceOf',
      args: [getAddress(state.client.evmAddress)],
    });
  }
  const [tokenAccount] = await findAssociatedTokenPda({
    mint: SOLANA_NETWORKS[network].usdc as SolanaAddress,
    owner: state.client.solanaAddress as SolanaAddress,
    tokenProgram: TOKEN_PROGRAM_ADDRESS,
  });
  const { value } = await createSolanaRpc(rpcUrl).getAccountInfo(tokenAccount, { encoding: 'base64' }).send();
  if (value === null) return 0n;
  return getTokenDecoder().decode(getBase64Encoder().encode(value.data[0])).amount;
}

/**
 * The client's balance once it is `expected`, or as it is when `waitMs` has passed (read once when
 * `waitMs` is 0).
 */
async function balanceOnce(
  state: SandboxState,
  network: NetworkName,
  expected: bigint,
  waitMs: number,
): Promise<bigint> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const balance = await clientUsdc(state, network);
    if (balance === expected || Date.now() >= deadline) return balance;
    await new Promise((resolve) => setTimeout(resolve, BALANCE_POLL_MS));
  }
}

/** Whether the chain shows the payment: the client's balance went down by exactly the amount. */
export function paymentSeen(paid: NonNullable<SandboxPayResult['paid']>): boolean {
  return paid.clientBalance.before - paid.clientBalance.after === paid.amountMicroUsdc;
}

/** A fetch that pays a 402 on `network` (which must be the only offer, or one x402-fetch would pick) with the client wallet. */
async function payingFetch(
  state: SandboxState,
  network: NetworkName,
  fetchFunction: typeof fetch,
): Promise<typeof fetch> {
  if (isSolanaNetwork(network)) {
    const { signer } = await solanaKeyFromSecret(Uint8Array.from(state.client.solanaSecretKey));
    const rpcUrls: Partial<Record<SolanaNetworkName, string>> = { [network]: state.rpc[network] };
    return wrapFetchWithSolanaPayment(fetchFunction, signer, { rpcUrls, maxAmountMicroUsdc: MAX_PAYMENT_MICRO_USDC });
  }
  const account = privateKeyToAccount(state.client.evmPrivateKey as Hex);
  if ((SupportedEVMNetworks as readonly string[]).includes(network)) {
    const rpcUrl = state.rpc[network];
    if (rpcUrl === undefined) throw new Error(`the sandbox state has no RPC URL for ${network}`);
    const chain = defineChain({
      id: EVM_NETWORKS[network].chainId,
      name: network,
      nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
      rpcUrls: { default: { http: [rpcUrl] } },
    });
    // x402-fetch picks the offer on the wallet's chain.
    const wallet = createWalletClient({ account, chain, transport: localTransport(rpcUrl) });
    return wrapFetchWithPayment(fetchFunction, wallet as never, MAX_PAYMENT_MICRO_USDC) as typeof fetch;
  }
  // x402-fetch 1.2.0 refuses a network it does not know: sign the same EIP-3009 authorization ourselves.
  return async (input, init) => {
    const response = await fetchFunction(input, init);
    if (response.status !== 402) return response;
    const body = (await response.json()) as Partial<PaymentRequiredBody>;
    const offer = body.accepts?.find((candidate) => candidate.scheme === 'exact' && candidate.network === network);
    if (!offer) throw new Error(`the 402 offers no exact payment on ${network}`);
    if (BigInt(offer.maxAmountRequired) > MAX_PAYMENT_MICRO_USDC)
      throw new Error('Payment amount exceeds maximum allowed');
    const { header } = await signEvmPayment(account, offer);
    const headers = new Headers(init?.headers);
    headers.set('X-PAYMENT', header);
    return fetchFunction(input, { ...init, headers });
  };
}

function postJson(body: unknown, headers: Record<string, string> = {}): RequestInit {
  return { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) };
}

async function offersOf(response: Response): Promise<PaymentRequirements[]> {
  const body = (await response.json()) as Partial<PaymentRequiredBody>;
  return Array.isArray(body.accepts) ? body.accepts : [];
}

/**
 * The offer to pay: the one on `preferred` (asking for it by name when the service offers it only
 * then, as it does for networks that standard clients do not know), else the first this client
 * can pay.
 */
async function chooseOffer(
  state: SandboxState,
  ask: (network?: NetworkName) => Promise<Response>,
  preferred: NetworkName | undefined,
): Promise<{ offer: PaymentRequirements; unpaid?: undefined } | { offer?: undefined; unpaid: Response }> {
  const first = await ask();
  if (first.status !== 402) return { unpaid: first };
  const offers = await offersOf(first);
  let offer = offers.find((candidate) => candidate.scheme === 'exact' && candidate.network === preferred);
  if (!offer && preferred !== undefined && canPay(state, preferred)) {
    const named = await ask(preferred);
    if (named.status === 402)
      offer = (await offersOf(named)).find(
        (candidate) => candidate.scheme === 'exact' && candidate.network === preferred,
      );
    else await named.body?.cancel();
  }
  offer ??= offers.find((candidate) => candidate.scheme === 'exact' && canPay(state, candidate.network));
  if (!offer) {
    throw new Error(
      `the service offers no payment this client can make (offers: ${offers.map((candidate) => candidate.network).join(', ') || 'none'})`,
    );
  }
  return { offer };
}

async function settled(response: Response): Promise<Pick<SandboxPayResult, 'status' | 'headers' | 'text'>> {
  return { status: response.status, headers: response.headers, text: await response.text() };
}

function paymentResponse(headers: Headers): SettleResponse | undefined {
  const header = headers.get('x-payment-response');
  if (!header) return undefined;
  try {
    return decodePaymentResponseHeader(header);
  } catch {
    return undefined;
  }
}

export interface SandboxPayOptions {
  /** How long to wait, at most, for the client's balance to show the payment; PAYMENT_SEEN_TIMEOUT_MS by default. */
  paymentSeenTimeoutMs?: number;
  /** Where relay-channel keeps the client's channels (DATA_DIR); needed by relay-channel only. */
  dataDir?: string;
}

/**
 * One paid call through the sandbox described by `state`, with `fetchFunction` for every HTTP
 * request to the service and the targets (balances are read over the sandbox's RPC URLs).
 */
export async function sandboxPay(
  state: SandboxState,
  command: SandboxCommand,
  fetchFunction: typeof fetch = fetch,
  { paymentSeenTimeoutMs = PAYMENT_SEEN_TIMEOUT_MS, dataDir }: SandboxPayOptions = {},
): Promise<SandboxPayResult> {
  if (command.mode === 'relay-channel') {
    if (dataDir === undefined) throw new Error('relay-channel keeps its channels in DATA_DIR: none was given');
    return payRelayThroughChannel(state, command.targetUrl, fetchFunction, { paymentSeenTimeoutMs, dataDir });
  }
  if (command.mode === 'proxy') {
    const response = await fetchFunction(
      `${state.baseUrl}/proxy`,
      postJson({ api_url: command.targetUrl, method: 'GET' }, { 'x-api-key': state.apiKey }),
    );
    const result = await settled(response);
    return { ...result, targetPayment: paymentResponse(result.headers) };
  }
  const url = command.mode === 'relay' ? `${state.baseUrl}/relay` : `${state.baseUrl}/llm/chat`;
  const body =
    command.mode === 'relay'
      ? (network?: NetworkName) => ({ api_url: command.targetUrl, method: 'GET', ...(network ? { network } : {}) })
      : () => ({ messages: [{ role: 'user', content: command.message }] });
  const preferred = command.mode === 'relay' ? sandboxTargetNetwork(state, command.targetUrl) : undefined;
  const chosen = await chooseOffer(state, (network) => fetchFunction(url, postJson(body(network))), preferred);
  if (!chosen.offer) return settled(chosen.unpaid);
  const { offer } = chosen;
  const network = offer.network as NetworkName;
  const amountMicroUsdc = BigInt(offer.maxAmountRequired);
  const before = await clientUsdc(state, network);

  // A relay names the chosen network, so the 402 the payer sees holds that one offer only.
  const pay = await payingFetch(state, network, fetchFunction);
  const result = await settled(await pay(url, postJson(body(command.mode === 'relay' ? network : undefined))));
  const ours =
    command.mode === 'relay'
      ? (result.headers.get('x-client-payment') ?? undefined)
      : paymentResponse(result.headers)?.transaction;
  // Wait for the money only when the service says it took it; otherwise what the chain shows now is the answer.
  const claimed = (ours !== undefined && ours !== '') || (result.status >= 200 && result.status < 300);
  const after = await balanceOnce(state, network, before - amountMicroUsdc, claimed ? paymentSeenTimeoutMs : 0);
  return {
    ...result,
    paid: {
      network,
      amountMicroUsdc,
      payer: payerOf(state, network),
      transaction: ours || undefined,
      clientBalance: { before, after },
    },
    ...(command.mode === 'relay' ? { targetPayment: paymentResponse(result.headers) } : {}),
  };
}

/** The channel as the contract holds it: its balance and what the receiver claimed from it. */
async function channelOnChain(
  state: SandboxState,
  network: EvmNetworkName,
  channelId: Hex,
): Promise<ChannelPayment['onChain']> {
  const [balance, totalClaimed] = await createPublicClient({
    transport: localTransport(rpcUrlOf(state, network)),
  }).readContract({
    address: BATCH_SETTLEMENT_ADDRESS,
    abi: batchSettlementAbi,
    functionName: 'channels',
    args: [channelId],
  });
  return { balance, totalClaimed };
}

function rpcUrlOf(state: SandboxState, network: NetworkName): string {
  const rpcUrl = state.rpc[network];
  if (rpcUrl === undefined) throw new Error(`the sandbox state has no RPC URL for ${network}`);
  return rpcUrl;
}

/**
 * The batch-settlement entry of the service's 402 for this relay call: on the target's own network
 * when it is a sandbox target on an EVM network (the call names that network), else the first one
 * on a network this client can pay.
 */
async function channelOffer(
  state: SandboxState,
  ask: (network?: NetworkName) => Promise<Response>,
  preferred: NetworkName | undefined,
): Promise<{ network: EvmNetworkName; unpaid?: undefined } | { network?: undefined; unpaid: Response }> {
  const named = preferred !== undefined && isEvmNetwork(preferred) ? preferred : undefined;
  const first = await ask(named);
  const header = first.headers.get('payment-required');
  if (first.status !== 402 || header === null) return { unpaid: first };
  await first.body?.cancel();
  const offers = decodePaymentRequiredHeader(header).accepts.filter((offer) => offer.scheme === BATCH_SETTLEMENT);
  for (const offer of offers) {
    const network = networkOfCaip2(offer.network);
    if (network !== undefined && isEvmNetwork(network) && canPay(state, network)) return { network };
  }
  throw new Error(
    `the service offers no batch-settlement channel for this call (channels are taken on ${state.channelNetworks.join(', ') || 'no network'}: CHANNEL_RECEIVER_NETWORKS)`,
  );
}

/** A fetch paying the service's batch-settlement offer on `network` only, with the client's channels kept in `storage`. */
function channelPayingFetch(
  state: SandboxState,
  network: EvmNetworkName,
  storage: SandboxChannelStorage,
  fetchFunction: typeof fetch,
): typeof fetch {
  const account = privateKeyToAccount(state.client.evmPrivateKey as Hex);
  const rpcUrl = rpcUrlOf(state, network);
  const chain = defineChain({
    id: EVM_NETWORKS[network].chainId,
    name: network,
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  });
  const publicClient = createPublicClient({ chain, transport: localTransport(rpcUrl) });
  const scheme = new BatchSettlementEvmScheme(toClientEvmSigner(account, publicClient), {
    storage,
    // A sandbox started afresh has fresh chains: a channel of this start is a new one (the salt is part of its id).
    salt: state.runId,
  });
  // Registered for this one network and scheme: the client pays no other entry of the 402. The local
  // USDC is allowed by address (@x402/core knows no default asset of some of these chains), capped
  // per payment as every sandbox payment is; its deposits are capped by the client at 5 times that.
  const client = new x402Client().register(CAIP2_NETWORKS[network], scheme).setSpendControls({
    allowedAssets: [
      {
        network: CAIP2_NETWORKS[network],
        asset: getAddress(EVM_NETWORKS[network].usdc),
        maxAmountPerPayment: atomicAmount(network, MAX_PAYMENT_MICRO_USDC).toString(),
      },
    ],
  });
  return wrapFetchWithPaymentV2(fetchFunction, client);
}

/** One /relay call paid through a batch-settlement channel, with what the chain shows of it. */
async function payRelayThroughChannel(
  state: SandboxState,
  targetUrl: string,
  fetchFunction: typeof fetch,
  { paymentSeenTimeoutMs, dataDir }: { paymentSeenTimeoutMs: number; dataDir: string },
): Promise<SandboxPayResult> {
  const url = `${state.baseUrl}/relay`;
  const body = (network?: NetworkName) =>
    postJson({ api_url: targetUrl, method: 'GET', ...(network ? { network } : {}) });
  const offered = await channelOffer(
    state,
    (network) => fetchFunction(url, body(network)),
    sandboxTargetNetwork(state, targetUrl),
  );
  if (!offered.network) return settled(offered.unpaid);
  const { network } = offered;
  const storage = new SandboxChannelStorage(path.join(dataDir, CHANNELS_FILE), state.runId);
  const before = await clientUsdc(state, network);

  const pay = channelPayingFetch(state, network, storage, fetchFunction);
  const result = await settled(await pay(url, body(network)));
  const targetPayment = paymentResponse(result.headers);
  const header = result.headers.get('payment-response');
  if (header === null) {
    // Nothing was taken: what the chain shows now is the answer.
    return { ...result, ...(targetPayment ? { targetPayment } : {}) };
  }
  const settlement = decodePaymentResponseHeaderV2(header);
  const extra = (settlement.extra ?? {}) as { chargedAmount?: string; channelState?: ChannelStateExtra };
  if (extra.channelState === undefined || extra.chargedAmount === undefined)
    throw new Error(`the service's PAYMENT-RESPONSE names no channel: ${JSON.stringify(settlement)}`);
  const deposit =
    settlement.transaction !== ''
      ? { transaction: settlement.transaction, amountMicroUsdc: BigInt(settlement.amount ?? '0') }
      : undefined;
  // A deposit is waited for until the client's balance shows it; a voucher moves nothing, read once.
  const after = await balanceOnce(
    state,
    network,
    before - (deposit?.amountMicroUsdc ?? 0n),
    deposit ? paymentSeenTimeoutMs : 0,
  );
  return {
    ...result,
    channel: {
      network,
      payer: getAddress(state.client.evmAddress),
      ...(deposit ? { deposit } : {}),
      chargedMicroUsdc: BigInt(extra.chargedAmount),
      channelState: extra.channelState,
      clientBalance: { before, after },
      onChain: await channelOnChain(state, network, extra.channelState.channelId),
    },
    ...(targetPayment ? { targetPayment } : {}),
  };
}

/**
 * Whether the chain shows the channel payment: a deposit took exactly its amount from the client;
 * a voucher took nothing; and the channel holds at least everything charged on it so far.
 */
export function channelPaymentSeen(channel: ChannelPayment): boolean {
  const moved = channel.clientBalance.before - channel.clientBalance.after;
  const covered = channel.onChain.balance >= BigInt(channel.channelState.chargedCumulativeAmount);
  return covered && channel.chargedMicroUsdc > 0n && moved === (channel.deposit?.amountMicroUsdc ?? 0n);
}

function usdc(microUsdc: bigint): string {
  const whole = microUsdc / 1_000_000n;
  const fraction = (microUsdc % 1_000_000n).toString().padStart(6, '0').replace(/0+$/, '');
  return fraction ? `${whole}.${fraction}` : whole.toString();
}

/** What the CLI prints: the status, what was paid and by whom, the service's headers, the body. */
export function describeResult(result: SandboxPayResult): string {
  const lines = [`HTTP ${result.status}`];
  if (result.paid) {
    const { network, amountMicroUsdc, payer, transaction, clientBalance } = result.paid;
    const named = `transaction ${transaction ?? '(none: not settled)'}`;
    const balances = `${clientBalance.before} -> ${clientBalance.after} micro-USDC`;
    const change = clientBalance.before - clientBalance.after;
    if (paymentSeen(result.paid)) {
      lines.push(
        `paid ${usdc(amountMicroUsdc)} USDC (${amountMicroUsdc} micro-USDC) on ${network} from ${payer}, ${named}; the client's balance: ${balances}`,
      );
    } else if (change === 0n) {
      lines.push(
        `NOT PAID: the client's balance on ${network} did not change (${clientBalance.after} micro-USDC): nothing was paid, though ${usdc(amountMicroUsdc)} USDC was asked (the service named ${named})`,
      );
    } else {
      lines.push(
        `NOT PAID AS ASKED: the client's balance on ${network} changed by ${-change} micro-USDC (${balances}), not by the ${amountMicroUsdc} micro-USDC asked (the service named ${named})`,
      );
    }
  }
  if (result.channel) lines.push(...describeChannelPayment(result.channel));
  if (result.targetPayment) {
    const { network, transaction, success, payer } = result.targetPayment;
    lines.push(
      `the service paid the target on ${network} from ${payer ?? '?'}: ${success ? 'settled' : 'not settled'}, transaction ${transaction || '(none)'}`,
    );
  }
  for (const [name, value] of result.headers) {
    if (/^(x-(payment-response|client-payment|service-|refund-|request-id)|payment-response)/i.test(name))
      lines.push(`${name}: ${value}`);
  }
  return `${lines.join('\n')}\n\n${result.text}\n`;
}

function describeChannelPayment(channel: ChannelPayment): string[] {
  const { network, payer, deposit, chargedMicroUsdc, channelState, clientBalance, onChain } = channel;
  const moved = clientBalance.before - clientBalance.after;
  const lines: string[] = [];
  if (deposit && moved === deposit.amountMicroUsdc) {
    lines.push(
      `deposited ${usdc(deposit.amountMicroUsdc)} USDC (${deposit.amountMicroUsdc} micro-USDC) into a channel on ${network} from ${payer}, transaction ${deposit.transaction}; the client's balance: ${clientBalance.before} -> ${clientBalance.after} micro-USDC`,
    );
  } else if (deposit) {
    lines.push(
      `NOT PAID AS SAID: the service names a deposit of ${deposit.amountMicroUsdc} micro-USDC (transaction ${deposit.transaction}), but the client's balance on ${network} changed by ${-moved} micro-USDC (${clientBalance.before} -> ${clientBalance.after})`,
    );
  } else if (moved === 0n) {
    lines.push(
      `paid by voucher: no tokens moved (the client's balance on ${network} stays ${clientBalance.after} micro-USDC)`,
    );
  } else {
    lines.push(
      `NOT AS SAID: a voucher moves no tokens, but the client's balance on ${network} changed by ${-moved} micro-USDC (${clientBalance.before} -> ${clientBalance.after})`,
    );
  }
  lines.push(
    `charged ${usdc(chargedMicroUsdc)} USDC (${chargedMicroUsdc} micro-USDC) on channel ${channelState.channelId}; charged on it so far ${channelState.chargedCumulativeAmount} micro-USDC (PAYMENT-RESPONSE channel state: balance ${channelState.balance}, claimed ${channelState.totalClaimed})`,
  );
  const covered = onChain.balance >= BigInt(channelState.chargedCumulativeAmount);
  lines.push(
    `the channel on chain: balance ${onChain.balance} micro-USDC, claimed ${onChain.totalClaimed}${covered ? '' : ': NOT ENOUGH for what was charged on it'}`,
  );
  return lines;
}

export function parseCommand(argv: string[]): SandboxCommand | undefined {
  const [mode, ...rest] = argv;
  if (mode === 'relay' && rest[0]) return { mode, targetUrl: rest[0] };
  if (mode === 'relay-channel' && rest[0]) return { mode, targetUrl: rest[0] };
  if (mode === 'proxy' && rest[0]) return { mode, targetUrl: rest[0] };
  if (mode === 'chat' && rest.length > 0) return { mode, message: rest.join(' ') };
  return undefined;
}

async function main(): Promise<void> {
  const command = parseCommand(process.argv.slice(2));
  if (!command) {
    process.stderr.write(
      'usage: npm run sandbox:pay -- relay|relay-channel|proxy <target url>, or -- chat <message>\n' +
        '  relay          the client wallet pays /relay (x402 exact), the service pays the target\n' +
        '  relay-channel  the same through a batch-settlement channel: the first run deposits, the next send a voucher\n' +
        '  proxy          the demo API key is charged credits, the service pays the target\n',
    );
    process.exit(2);
  }
  const dataDir = path.resolve(process.env.DATA_DIR ?? './.data');
  const stateFile = path.join(dataDir, 'sandbox.json');
  let state: SandboxState;
  try {
    state = JSON.parse(readFileSync(stateFile, 'utf8')) as SandboxState;
  } catch {
    process.stderr.write(`no sandbox state at ${stateFile}: start the sandbox with \`npm start\` first\n`);
    process.exit(1);
  }
  try {
    const result = await sandboxPay(state, command, fetch, { dataDir });
    process.stdout.write(describeResult(result));
    if (result.paid && !paymentSeen(result.paid)) process.exitCode = 1;
    if (command.mode === 'relay-channel' && !(result.channel && channelPaymentSeen(result.channel)))
      process.exitCode = 1;
  } catch (error) {
    process.stderr.write(`sandbox:pay failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href)
  await main();
