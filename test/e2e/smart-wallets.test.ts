// Payers that are smart-contract wallets: an ERC-1271 SmartWallet deployed on the local chain pays
// /relay and /llm/chat with an EIP-3009 authorization its owner signed (USDC asks the wallet), and
// a counterfactual wallet's ERC-6492-wrapped signature is refused with a 402 until the wallet is
// deployed (we never send the wrapper's factory call), then accepted and settled unwrapped. A
// signature the wallet rejects is a 402 and moves nothing. Every amount is read from the chain.
import { parseAbi, parseEventLogs, toFunctionSelector, type Address, type Hash } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { signEvmPayment } from '../../devnet/evm/authorization';
import {
  createSmartWallet,
  deployWalletFactory,
  type SmartWallet,
  type WalletFactory,
  type WalletSignatureEncoding,
} from '../../devnet/evm/smart-wallet';
import { startPeers, type Peers, type PaymentRequirements as PeerRequirements } from '../../devnet/index';
import { startLocalLlm, type LocalLlm } from '../../devnet/llm';
import { decodePaymentResponseHeader } from '../../payments/x402/headers';
import { llmEnv, startProxyService } from '../support/proxy';
import { relayRows } from '../support/relay';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base-sepolia';
const PRICE = 12_345n;
/** ceil(12,345 x 1.03) */
const TOTAL = 12_716n;
/** LLM_PRICE_USDC 0.01 */
const CHAT_PRICE = 10_000n;
const FUNDING = 1_000_000n;

const BYTES_FORM = toFunctionSelector(
  'transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)',
);
const VRS_FORM = toFunctionSelector(
  'transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32)',
);
const transferEvent = parseAbi(['event Transfer(address indexed from, address indexed to, uint256 value)']);

let peers: Peers;
let llm: LocalLlm;
let t: TestService;
let db: Db;
let factory: WalletFactory;

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK], pricesMicroUsdc: { paid: PRICE } });
  llm = await startLocalLlm();
  t = await startProxyService(peers, {
    ...llmEnv(llm),
  });
  db = t.database.handle.db;
  factory = await deployWalletFactory(peers.evmChains[NETWORK]!);
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(llm)?.close();
  await ifStarted(peers)?.stop();
});

const target = () => peers.targets[NETWORK]!;
const service = () => peers.wallets.service.evm.address;
const relayBody = () => ({ api_url: target().routes.paid.url, method: 'GET' });
const chatBody = { messages: [{ role: 'user', content: 'hello wallet' }] };

async function fundedWallet(options: { deployed?: boolean } = {}): Promise<SmartWallet> {
  const wallet = await createSmartWallet(factory, options);
  await peers.mint(NETWORK, wallet.address, FUNDING);
  return wallet;
}

async function offer(path: '/relay' | '/llm/chat', body: unknown): Promise<PeerRequirements> {
  const res = await t.client.post(path, body);
  expect(res.status).toBe(402);
  const accept = (res.body.accepts as PeerRequirements[]).find((entry) => entry.network === NETWORK);
  expect(accept).toBeDefined();
  return accept!;
}

async function header(
  wallet: SmartWallet,
  requirements: PeerRequirements,
  options: { encoding?: WalletSignatureEncoding; erc6492?: boolean; wrongKey?: boolean } = {},
): Promise<string> {
  const account = wallet.account({
    encoding: options.encoding,
    erc6492: options.erc6492,
    signer: options.wrongKey ? privateKeyToAccount(generatePrivateKey()) : undefined,
  });
  return (await signEvmPayment(account, requirements)).header;
}

async function balances(payer: Address) {
  return {
    payer: await peers.usdcBalance(NETWORK, payer),
    service: await peers.usdcBalance(NETWORK, service()),
    target: await peers.usdcBalance(NETWORK, target().routes.paid.payTo),
  };
}

/** The USDC transfers of a transaction and the form of transferWithAuthorization it called. */
async function settlement(hash: string) {
  const { publicClient } = peers.evmChains[NETWORK]!;
  const [receipt, transaction] = await Promise.all([
    publicClient.getTransactionReceipt({ hash: hash as Hash }),
    publicClient.getTransaction({ hash: hash as Hash }),
  ]);
  expect(receipt.status).toBe('success');
  return {
    selector: transaction.input.slice(0, 10),
    transfers: parseEventLogs({ abi: transferEvent, logs: receipt.logs }).map(({ args }) => ({ ...args })),
  };
}

describe('an ERC-1271 contract wallet deployed on the local chain', () => {
  it('pays /relay with a 192-byte signature (the bytes form): the wallet pays us, we pay the target', async () => {
    const wallet = await fundedWallet();
    const requirements = await offer('/relay', relayBody());
    const before = await balances(wallet.address);
    const res = await t.client.post('/relay', relayBody(), {
      headers: { 'X-PAYMENT': await header(wallet, requirements, { encoding: 'abi' }) },
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ ok: true, route: 'paid', target: NETWORK, network: NETWORK });
    const clientPayment = res.headers.get('x-client-payment')!;
    expect(await settlement(clientPayment)).toEqual({
      selector: BYTES_FORM,
      transfers: [{ from: wallet.address, to: service(), value: TOTAL }],
    });
    const toTarget = decodePaymentResponseHeader(res.headers.get('x-payment-response'));
    expect(toTarget).toMatchObject({ ok: true, value: { success: true, network: NETWORK, payer: service() } });
    const after = await balances(wallet.address);
    expect(after).toEqual({
      payer: before.payer - TOTAL,
      service: before.service + TOTAL - PRICE,
      target: before.target + PRICE,
    });
    const [row] = (await relayRows(db)).filter((candidate) => candidate.client_tx_hash === clientPayment);
    expect(row).toMatchObject({ state: 'delivered', payer: wallet.address, amount_micro: TOTAL });
  });

  it.each<[WalletSignatureEncoding, string]>([
    ['abi', BYTES_FORM],
    ['ecdsa', VRS_FORM],
  ])('pays /llm/chat with its %s signature; the price moves from the wallet to us', async (encoding, selector) => {
    const wallet = await fundedWallet();
    const requirements = await offer('/llm/chat', chatBody);
    const before = await balances(wallet.address);
    const res = await t.client.post('/llm/chat', chatBody, {
      headers: { 'X-PAYMENT': await header(wallet, requirements, { encoding }) },
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ response: 'Echo: hello wallet', model: llm.model });
    const paid = decodePaymentResponseHeader(res.headers.get('x-payment-response'));
    expect(paid).toMatchObject({ ok: true, value: { success: true, network: NETWORK, payer: wallet.address } });
    if (paid.ok)
      expect(await settlement(paid.value.transaction)).toEqual({
        selector,
        transfers: [{ from: wallet.address, to: service(), value: CHAT_PRICE }],
      });
    const after = await balances(wallet.address);
    expect([after.payer, after.service]).toEqual([before.payer - CHAT_PRICE, before.service + CHAT_PRICE]);
  });

  it("a signature the wallet rejects (another key signed) is a 402 on both endpoints and moves nothing; the owner's pays", async () => {
    const wallet = await fundedWallet();
    const rowsBefore = (await relayRows(db)).length;
    const before = await balances(wallet.address);
    const relay = await t.client.post('/relay', relayBody(), {
      headers: { 'X-PAYMENT': await header(wallet, await offer('/relay', relayBody()), { wrongKey: true }) },
    });
    expect(relay.status).toBe(402);
    expect(relay.body.error).toMatch(/^invalid_signature: /);
    const chat = await t.client.post('/llm/chat', chatBody, {
      headers: {
        'X-PAYMENT': await header(wallet, await offer('/llm/chat', chatBody), { encoding: 'abi', wrongKey: true }),
      },
    });
    expect(chat.status).toBe(402);
    expect(JSON.stringify(chat.body)).toMatch(/signature/);
    expect(await balances(wallet.address)).toEqual(before);
    expect((await relayRows(db)).length).toBe(rowsBefore);
    // The same wallet with its owner's signature: the refusals were the wallet's answer, not ours.
    const paid = await t.client.post('/llm/chat', chatBody, {
      headers: { 'X-PAYMENT': await header(wallet, await offer('/llm/chat', chatBody), { encoding: 'abi' }) },
    });
    expect(paid.status).toBe(200);
    const after = await balances(wallet.address);
    expect([after.payer, after.service]).toEqual([before.payer - CHAT_PRICE, before.service + CHAT_PRICE]);
  });
});

describe('an ERC-6492 counterfactual wallet', () => {
  it('is refused with a 402 while undeployed (we do not deploy it); once deployed, the same payment settles unwrapped', async () => {
    const wallet = await fundedWallet({ deployed: false });
    expect(await wallet.isDeployed()).toBe(false);
    const requirements = await offer('/relay', relayBody());
    const payment = await header(wallet, requirements, { erc6492: true });
    const before = await balances(wallet.address);
    const rowsBefore = (await relayRows(db)).length;

    const refused = await t.client.post('/relay', relayBody(), { headers: { 'X-PAYMENT': payment } });
    expect(refused.status).toBe(402);
    expect(refused.body.error).toMatch(/^invalid_signature: .*counterfactual \(ERC-6492\) wallet that is not deployed/);
    const chat = await t.client.post('/llm/chat', chatBody, {
      headers: { 'X-PAYMENT': await header(wallet, await offer('/llm/chat', chatBody), { erc6492: true }) },
    });
    expect(chat.status).toBe(402);
    expect(JSON.stringify(chat.body)).toMatch(/not deployed/);
    expect(await wallet.isDeployed()).toBe(false);
    expect(await balances(wallet.address)).toEqual(before);
    expect((await relayRows(db)).length).toBe(rowsBefore);

    // The payer deploys its wallet; the wrapped signature it already sent now pays.
    await factory.deploy(wallet.owner.address, wallet.salt);
    const res = await t.client.post('/relay', relayBody(), { headers: { 'X-PAYMENT': payment } });
    expect(res.status).toBe(200);
    expect(await settlement(res.headers.get('x-client-payment')!)).toEqual({
      selector: VRS_FORM,
      transfers: [{ from: wallet.address, to: service(), value: TOTAL }],
    });
    expect(await balances(wallet.address)).toEqual({
      payer: before.payer - TOTAL,
      service: before.service + TOTAL - PRICE,
      target: before.target + PRICE,
    });
  });
});
