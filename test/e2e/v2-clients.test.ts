// Being paid in either x402 version: every standard client (x402-fetch 1.2, @x402/fetch 2.27 with
// and without the v1 names, @x402/svm, and the legacy Solana message HTTPayer's SDK builds) pays
// /relay and /llm/chat, unmodified, against the local peers. Every cell reads the money legs from
// the chains, and every response of the service is checked against the document (the clients'
// own fetch is wrapped with the contract check). Our 402 carries the version 1 body and the same
// offers in PAYMENT-REQUIRED; each client is answered in the version it paid in.
import { x402Client } from '@x402/core/client';
import { declarePaymentIdentifierExtension, PAYMENT_IDENTIFIER } from '@x402/extensions/payment-identifier';
import { wrapFetchWithPayment as wrapFetchV2 } from '@x402/fetch';
import { ExactSvmScheme } from '@x402/svm/exact/client';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { wrapFetchWithPayment as wrapFetchV1 } from 'x402-fetch';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { x402ClientV2 } from '../../devnet/peers/v2-client';
import { startLocalLlm, type LocalLlm } from '../../devnet/llm';
import { generateSolanaKey, type SolanaKey } from '../../devnet/svm/keys';
import type { NetworkName } from '../../devnet/networks';
import { caip2Of } from '../../payments/basics/networkTable';
import type { PaymentRequirements } from '../../payments/x402/types';
import { requirementsToV2 } from '../../payments/x402/v2';
import { checkResponse, type ContractResponse } from '../support/contract';
import { legacyTransfer } from '../support/httpayer-sdk';
import { startLlmService } from '../support/proxy';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const EVM = 'base' as const;
const SOLANA = 'solana' as const;
const TARGET_PRICE = 10_000n;
/** ceil(10,000 x 1.03), the relay fee's minimum being 0. */
const RELAY_PRICE = 10_300n;
/** LLM_PRICE_USDC 0.01. */
const CHAT_PRICE = 10_000n;

let peers: Peers;
let llm: LocalLlm;
let t: TestService;

beforeAll(async () => {
  [peers, llm] = await Promise.all([startPeers({ networks: [EVM, SOLANA], v2Targets: false }), startLocalLlm()]);
  t = await startLlmService(peers, llm);
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(llm)?.close();
  await ifStarted(peers)?.stop();
});

/** fetch with every answer of the service checked against the document, as the clients' transport. */
const checkedFetch: typeof fetch = async (input, init) => {
  const request = new Request(input, init);
  const response = await fetch(request);
  const text = await response.clone().text();
  const json = (response.headers.get('content-type') ?? '').startsWith('application/json') && text !== '';
  const url = new URL(request.url);
  const checked: ContractResponse = {
    status: response.status,
    headers: response.headers,
    body: json ? JSON.parse(text) : text,
    text,
    operationId: undefined,
  };
  await checkResponse(request.method, `${url.pathname}${url.search}`, checked);
  return response;
};

function decodeHeader(value: string | null): any {
  expect(value).toMatch(/^[A-Za-z0-9+/]+={0,2}$/);
  return JSON.parse(Buffer.from(value!, 'base64').toString('utf8'));
}

type Payer = { network: NetworkName; address: string };
type Client = {
  name: string;
  /** The version the client pays our 402 in, now that the 402 carries both. */
  version: 1 | 2;
  payer: () => Promise<Payer & { pay: (path: string, body: unknown) => Promise<Response> }>;
};

async function evmPayer(makeFetch: (privateKey: `0x${string}`) => typeof fetch) {
  const privateKey = generatePrivateKey();
  const address = privateKeyToAccount(privateKey).address;
  await peers.mint(EVM, address, 1_000_000n);
  const paying = makeFetch(privateKey);
  return {
    network: EVM,
    address,
    pay: (path: string, body: unknown) =>
      paying(`${t.service.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      }),
  };
}

async function solanaPayer(): Promise<SolanaKey> {
  const key = await generateSolanaKey();
  await peers.mint(SOLANA, key.address, 1_000_000n);
  return key;
}

const CLIENTS: Client[] = [
  {
    name: 'x402-fetch 1.2',
    version: 1,
    payer: () =>
      evmPayer(
        (privateKey) =>
          wrapFetchV1(checkedFetch, peers.evmWalletClient(EVM, privateKey) as never, 100_000n) as typeof fetch,
      ),
  },
  {
    name: '@x402/fetch 2.27 with the v1 names',
    version: 2,
    payer: () =>
      evmPayer((privateKey) =>
        wrapFetchV2(checkedFetch, x402ClientV2(privateKeyToAccount(privateKey), { v1Names: true })),
      ),
  },
  {
    name: '@x402/fetch 2.27, version 2 only',
    version: 2,
    payer: () => evmPayer((privateKey) => wrapFetchV2(checkedFetch, x402ClientV2(privateKeyToAccount(privateKey)))),
  },
  {
    name: "@x402/svm's client (a Memo instruction)",
    version: 2,
    payer: async () => {
      const key = await solanaPayer();
      const client = new x402Client().register(
        'solana:*',
        new ExactSvmScheme(key.signer, { rpcUrl: peers.rpcUrls[SOLANA]! }),
      );
      const paying = wrapFetchV2(checkedFetch, client);
      return {
        network: SOLANA,
        address: key.address,
        pay: (path: string, body: unknown) =>
          paying(`${t.service.url}${path}`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify(body),
          }),
      };
    },
  },
  {
    name: "a legacy Solana message as HTTPayer's SDK builds it",
    version: 1,
    payer: async () => {
      const key = await solanaPayer();
      // The SDK's x402 Solana session: one unpaid request, then the same body with X-PAYMENT.
      const pay = async (path: string, body: unknown) => {
        const first = await t.client.post(path, body);
        expect(first.status).toBe(402);
        const accept = (first.body.accepts as PaymentRequirements[]).find((entry) => entry.network === SOLANA)!;
        const transaction = await legacyTransfer({ signer: key.signer, rpcUrl: peers.rpcUrls[SOLANA]! }, accept);
        const header = Buffer.from(
          JSON.stringify({ x402Version: 1, scheme: 'exact', network: accept.network, payload: { transaction } }),
        ).toString('base64');
        return checkedFetch(`${t.service.url}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'X-PAYMENT': header },
          body: JSON.stringify(body),
        });
      };
      return { network: SOLANA, address: key.address, pay };
    },
  },
];

const ENDPOINTS = ['/relay', '/llm/chat'] as const;

const target = (network: NetworkName) => peers.targets[network]!;
const serviceWallet = (network: NetworkName) =>
  network === SOLANA ? peers.wallets.service.solana.address : peers.wallets.service.evm.address;

function callOf(endpoint: (typeof ENDPOINTS)[number], network: NetworkName, client: string) {
  return endpoint === '/relay'
    ? { api_url: target(network).routes.paid.url, method: 'GET' }
    : { messages: [{ role: 'user', content: `hello from ${client}` }] };
}

/**
 * Our 402 for this call: the v1 body, and the same offers in v2 form in PAYMENT-REQUIRED, whose
 * error names the payment header of its own version.
 */
async function expectBothForms(endpoint: string, body: unknown) {
  const res = await t.client.post(endpoint, body);
  expect(res.status).toBe(402);
  expect(res.body.x402Version).toBe(1);
  const required = decodeHeader(res.headers.get('payment-required'));
  const accepts = res.body.accepts as PaymentRequirements[];
  expect(required).toEqual({
    x402Version: 2,
    error: 'PAYMENT-SIGNATURE header is required',
    resource: {
      url: `${t.service.url}${endpoint}`,
      description: accepts[0]!.description,
      mimeType: 'application/json',
    },
    accepts: accepts.map(requirementsToV2),
    // A payment id is honoured on both (it means what Idempotency-Key means): declared as @x402/extensions does.
    extensions: { [PAYMENT_IDENTIFIER]: declarePaymentIdentifierExtension(false) },
  });
  expect(required.accepts.map((entry: { network: string }) => entry.network)).toContain(caip2Of(EVM));
}

describe.each(CLIENTS)('$name pays', (client) => {
  it.each(ENDPOINTS)('%s, and the money moves on chain', async (endpoint) => {
    const payer = await client.payer();
    const network = payer.network;
    const body = callOf(endpoint, network, client.name);
    await expectBothForms(endpoint, body);
    const price = endpoint === '/relay' ? RELAY_PRICE : CHAT_PRICE;
    const legs = async () => ({
      client: await peers.usdcBalance(network, payer.address),
      service: await peers.usdcBalance(network, serviceWallet(network)),
      target: await peers.usdcBalance(network, target(network).routes.paid.payTo),
    });
    const before = await legs();

    const res = await payer.pay(endpoint, body);

    expect(res.status).toBe(200);
    const answer = await res.json();
    if (endpoint === '/relay') expect(answer).toEqual({ ok: true, route: 'paid', target: network, network });
    else expect(answer).toEqual({ response: `Echo: hello from ${client.name}`, model: llm.model });
    const delivered = endpoint === '/relay' ? TARGET_PRICE : 0n;
    expect(await legs()).toEqual({
      client: before.client - price,
      service: before.service + price - delivered,
      target: before.target + delivered,
    });
    // Answered in the version it paid in.
    if (client.version === 2) {
      expect(decodeHeader(res.headers.get('payment-response'))).toMatchObject({
        success: true,
        network: caip2Of(network),
        payer: payer.address,
        transaction: expect.any(String),
      });
      if (endpoint === '/llm/chat') expect(res.headers.get('x-payment-response')).toBeNull();
    } else {
      expect(res.headers.get('payment-response')).toBeNull();
      expect(decodeHeader(res.headers.get('x-payment-response'))).toMatchObject({ success: true });
    }
  });
});
