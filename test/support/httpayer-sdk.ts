/**
 * A client that speaks to the service the way HTTPayer's Python SDK (httpayer/client.py and its
 * vendored x402 requests adapter) does, byte for byte where it matters:
 *
 * - /relay, /relay?format=json: body {api_url, method, payload, params, headers, network?} (payload,
 *   params and headers always present, `{}` when empty); on a 402 the adapter takes the first
 *   `exact` entry of `accepts` without looking at its network, signs an EIP-3009 authorization
 *   valid from now - 60 s to now + maxTimeoutSeconds with a random nonce, and resends the same body
 *   once with `X-Payment` (that casing) and Access-Control-Expose-Headers. An EVM wallet wraps all
 *   of this in a loop: while the answer is 402, wait retryDelayMs (1 s) and start again with a fresh
 *   authorization, at most 5 times.
 * - /proxy, /proxy/sim: body {api_url, method, payload, timeout, params?, headers?} with the client
 *   timeout in seconds (600 by default), `x-api-key`, and `?format=json` in JSON response mode.
 * - /relay with a Solana wallet (x402_solana): no retry loop; the first entry of `accepts` whatever
 *   its scheme or network, a legacy transaction (SetComputeUnitLimit 50,000, SetComputeUnitPrice 1,
 *   TransferChecked to the payTo's associated token account, fee payer = extra.feePayer) signed by
 *   the payer only, sent once as `X-PAYMENT` next to its wallet-signature headers.
 * - GET /config: `networks.v1` is the list of networks it accepts from the caller.
 *
 * Requests go out through node:http so header names keep their case; bodies are serialised as
 * Python's json.dumps does (", " and ": " separators, non-ASCII escaped). Every answer is checked
 * against the OpenAPI document before the caller sees it.
 */
import http from 'node:http';
import { createHash, randomBytes } from 'node:crypto';
import { gunzipSync, inflateSync } from 'node:zlib';
import {
  createSolanaRpc,
  getAddressEncoder,
  getBase64EncodedWireTransaction,
  getCompiledTransactionMessageEncoder,
  getUtf8Encoder,
  isSignerRole,
  isWritableRole,
  signBytes,
  type Address,
  type Blockhash,
  type Instruction,
  type KeyPairSigner,
  type Transaction,
} from '@solana/kit';
import { getSetComputeUnitLimitInstruction, getSetComputeUnitPriceInstruction } from '@solana-program/compute-budget';
import { findAssociatedTokenPda, getTransferCheckedInstruction, TOKEN_PROGRAM_ADDRESS } from '@solana-program/token';
import { getAddress, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { transferWithAuthorizationTypes } from '../../payments/chains/evm';
import { checkResponse, type ContractResponse } from './contract';

/** The SDK's own network -> chain id table (it signs with these, whatever the 402 says). */
export const SDK_CHAIN_IDS: Record<string, number> = {
  'base-sepolia': 84532,
  base: 8453,
  'avalanche-fuji': 43113,
  avalanche: 43114,
  'skale-base-sepolia': 324705682,
  'skale-base': 1187947933,
};

/** json.dumps of Python's standard library with its defaults. */
export function pythonJson(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (Array.isArray(value)) return `[${value.map(pythonJson).join(', ')}]`;
  if (typeof value === 'object') {
    return `{${Object.entries(value as Record<string, unknown>)
      .map(([key, item]) => `${pythonJson(key)}: ${pythonJson(item)}`)
      .join(', ')}}`;
  }
  return JSON.stringify(value).replace(
    /[\u007f-\uffff]/g,
    (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

export interface SdkAttempt {
  /** 0 for the first call of the retry loop. */
  index: number;
  /** The X-Payment sent on the paid resend of this attempt (decoded), if there was one. */
  payment?: SdkEvmPayment;
  status: number;
}

export interface SdkEvmPayment {
  x402Version: number;
  scheme: string;
  network: string;
  payload: {
    signature: Hex;
    authorization: { from: string; to: string; value: string; validAfter: string; validBefore: string; nonce: Hex };
  };
}

export interface SdkOptions {
  routerUrl: string;
  apiKey?: string;
  /** Relay mode with an EVM wallet. */
  privateKey?: Hex;
  /** Relay mode with a Solana wallet, and the RPC URL it builds its transaction with. */
  solana?: { signer: KeyPairSigner; rpcUrl: string };
  /** Default network of relay calls; the SDK picks `base` for an EVM wallet. */
  network?: string;
  /** Client timeout in seconds, sent in /proxy bodies. */
  timeout?: number | null;
  responseMode?: 'text' | 'json';
  /** Spacing of the 402 retry loop; the SDK's is 1000 ms. Tests may only shorten it. */
  retryDelayMs?: number;
  maxRetries?: number;
  /** Called after each attempt of the retry loop, before the wait (the test may act on the chain). */
  onAttempt?: (attempt: SdkAttempt) => Promise<void> | void;
}

export interface SdkCall {
  method: string;
  url: string;
  payload?: Record<string, unknown>;
  params?: Record<string, unknown>;
  headers?: Record<string, string>;
  network?: string;
}

export class HttpayerSdkClient {
  readonly base: string;
  readonly attempts: SdkAttempt[] = [];
  supportedNetworks: string[] | undefined;
  private readonly account;

  constructor(private readonly options: SdkOptions) {
    this.base = options.routerUrl.replace(/\/+$/, '').replace(/\/proxy$/, '');
    this.account = options.privateKey ? privateKeyToAccount(options.privateKey) : undefined;
  }

  get mode(): 'relay' | 'proxy' {
    return this.account || this.options.solana ? 'relay' : 'proxy';
  }

  private get suffix(): string {
    return this.options.responseMode === 'json' ? '?format=json' : '';
  }

  private get timeout(): number | null {
    return this.options.timeout === undefined ? 600 : this.options.timeout;
  }

  /** The SDK's _load_config: the networks it will accept from its caller. */
  async loadConfig(): Promise<ContractResponse> {
    const response = await send('GET', `${this.base}/config`, [], undefined);
    if (response.status === 200) this.supportedNetworks = response.body.networks?.v1 ?? [];
    return response;
  }

  /** The SDK's _validate_network with strict_networks (its default). */
  validateNetwork(network: string | undefined): void {
    if (!network || !this.supportedNetworks || this.supportedNetworks.length === 0) return;
    if (!this.supportedNetworks.includes(network)) {
      throw new Error(`Unsupported network '${network}'. Supported: ${this.supportedNetworks.join(', ')}`);
    }
  }

  /** pay_invoice: /relay in relay mode, /proxy in proxy mode. */
  async payInvoice(call: SdkCall): Promise<ContractResponse> {
    this.validateNetwork(call.network);
    if (this.mode === 'relay') return this.callRelay(`${this.base}/relay${this.suffix}`, call);
    return this.callRouter(`${this.base}/proxy${this.suffix}`, call);
  }

  /** request(simulate=True) in proxy mode: /proxy/sim, with ?format=json in JSON response mode. */
  async simulate(call: SdkCall): Promise<ContractResponse> {
    return this.callRouter(`${this.base}/proxy/sim${this.suffix}`, call);
  }

  private async callRouter(endpoint: string, call: SdkCall): Promise<ContractResponse> {
    const data: Record<string, unknown> = {
      api_url: call.url,
      method: call.method,
      payload: call.payload ?? {},
      timeout: this.timeout,
    };
    if (call.params && Object.keys(call.params).length > 0) data.params = call.params;
    if (call.headers && Object.keys(call.headers).length > 0) data.headers = call.headers;
    return send(
      'POST',
      endpoint,
      [...REQUESTS_HEADERS, ['x-api-key', this.options.apiKey ?? ''], ['Content-Type', 'application/json']],
      pythonJson(data),
    );
  }

  private async callRelay(endpoint: string, call: SdkCall): Promise<ContractResponse> {
    const data: Record<string, unknown> = {
      api_url: call.url,
      method: call.method,
      payload: call.payload ?? {},
      params: call.params ?? {},
      headers: call.headers ?? {},
    };
    const network = call.network ?? this.options.network ?? (this.options.solana ? 'solana' : 'base');
    if (network) data.network = network;
    const body = pythonJson(data);
    if (this.options.solana) return this.solanaPost(endpoint, body, this.options.solana);
    const maxRetries = this.options.maxRetries ?? 5;
    const delayMs = this.options.retryDelayMs ?? 1_000;
    let response!: ContractResponse;
    for (let index = 0; index < maxRetries; index++) {
      const attempt = await this.x402Post(endpoint, body, index);
      response = attempt.response;
      this.attempts.push(attempt.record);
      await this.options.onAttempt?.(attempt.record);
      if (response.status !== 402 || index === maxRetries - 1) return response;
      await new Promise((resolve) => setTimeout(resolve, delayMs));
    }
    return response;
  }

  /** The vendored x402HTTPAdapter.send: one unpaid request, and on 402 one resend with X-Payment. */
  private async x402Post(
    endpoint: string,
    body: string,
    index: number,
  ): Promise<{ response: ContractResponse; record: SdkAttempt }> {
    const headers: Array<[string, string]> = [...REQUESTS_HEADERS, ['Content-Type', 'application/json']];
    const first = await send('POST', endpoint, headers, body);
    if (first.status !== 402) return { response: first, record: { index, status: first.status } };
    const accepts = (first.body?.accepts ?? []) as Array<Record<string, any>>;
    const selected = accepts.find((entry) => entry.scheme === 'exact');
    if (!selected) throw new Error('No supported payment scheme found');
    const payment = await this.sign(selected, first.body.x402Version);
    const header = Buffer.from(pythonJson(payment)).toString('base64');
    const paid = await send(
      'POST',
      endpoint,
      [...headers, ['X-Payment', header], ['Access-Control-Expose-Headers', 'X-Payment-Response']],
      body,
    );
    return { response: paid, record: { index, payment, status: paid.status } };
  }

  /** X402SolanaSession.post: wallet-signed headers, and on 402 one resend with X-PAYMENT. */
  private async solanaPost(
    endpoint: string,
    body: string,
    solana: { signer: KeyPairSigner; rpcUrl: string },
  ): Promise<ContractResponse> {
    const timestamp = String(Date.now());
    const bodyHash = createHash('sha256').update(body).digest('hex');
    const message = getUtf8Encoder().encode(['POST', endpoint, timestamp, bodyHash].join(':'));
    const walletSignature = Buffer.from(await signBytes(solana.signer.keyPair.privateKey, message)).toString('base64');
    const headers: Array<[string, string]> = [
      ...REQUESTS_HEADERS,
      ['Content-Type', 'application/json'],
      ['X-Wallet-Address', solana.signer.address],
      ['X-Timestamp', timestamp],
      ['X-Signature', walletSignature],
    ];
    const first = await send('POST', endpoint, headers, body);
    this.attempts.push({ index: 0, status: first.status });
    if (first.status !== 402) return first;
    const accept = first.body?.accepts?.[0] as Record<string, any> | undefined;
    if (!accept) return first;
    const transaction = await legacyTransfer(solana, accept);
    const header = Buffer.from(
      pythonJson({ x402Version: 1, scheme: accept.scheme, network: accept.network, payload: { transaction } }),
    ).toString('base64');
    const paid = await send('POST', endpoint, [...headers, ['X-PAYMENT', header]], body);
    this.attempts.push({ index: 0, status: paid.status });
    return paid;
  }

  /** x402Client.create_payment_header + exact.sign_payment_header. */
  private async sign(requirements: Record<string, any>, x402Version: number): Promise<SdkEvmPayment> {
    if (!this.account) throw new Error('relay mode needs a wallet');
    const chainId = SDK_CHAIN_IDS[requirements.network];
    if (chainId === undefined) throw new Error(`Unsupported network: ${requirements.network}`);
    const now = Math.floor(Date.now() / 1000);
    const nonce: Hex = `0x${randomBytes(32).toString('hex')}`;
    const authorization = {
      from: this.account.address,
      to: requirements.payTo as string,
      value: requirements.maxAmountRequired as string,
      validAfter: String(now - 60),
      validBefore: String(now + Number(requirements.maxTimeoutSeconds)),
      nonce,
    };
    const signature = await this.account.signTypedData({
      domain: {
        name: requirements.extra.name,
        version: requirements.extra.version,
        chainId,
        verifyingContract: getAddress(requirements.asset),
      },
      types: transferWithAuthorizationTypes,
      primaryType: 'TransferWithAuthorization',
      message: {
        from: authorization.from,
        to: getAddress(authorization.to),
        value: BigInt(authorization.value),
        validAfter: BigInt(authorization.validAfter),
        validBefore: BigInt(authorization.validBefore),
        nonce: authorization.nonce,
      },
    });
    return {
      x402Version,
      scheme: requirements.scheme,
      network: requirements.network,
      payload: { signature, authorization },
    };
  }
}

/**
 * exact_svm.create_transfer_transaction, for token accounts that exist (the SDK would create missing
 * ones): SetComputeUnitLimit 50,000, SetComputeUnitPrice 1, TransferChecked, in a legacy message
 * from solders' Message.new_with_blockhash, partially signed by the payer.
 */
export async function legacyTransfer(
  solana: { signer: KeyPairSigner; rpcUrl: string },
  accept: Record<string, any>,
): Promise<string> {
  const mint = accept.asset as Address;
  const feePayer = accept.extra.feePayer as Address;
  const [[source], [destination]] = await Promise.all([
    findAssociatedTokenPda({ mint, owner: solana.signer.address, tokenProgram: TOKEN_PROGRAM_ADDRESS }),
    findAssociatedTokenPda({ mint, owner: accept.payTo as Address, tokenProgram: TOKEN_PROGRAM_ADDRESS }),
  ]);
  const { value: blockhash } = await createSolanaRpc(solana.rpcUrl).getLatestBlockhash().send();
  const messageBytes = soldersLegacyMessage(
    feePayer,
    [
      getSetComputeUnitLimitInstruction({ units: 50_000 }),
      getSetComputeUnitPriceInstruction({ microLamports: 1n }),
      getTransferCheckedInstruction({
        source,
        mint,
        destination,
        authority: solana.signer,
        amount: BigInt(accept.maxAmountRequired),
        decimals: 6,
      }),
    ],
    blockhash.blockhash,
  );
  // Transaction.partial_sign: the payer's slot signed, the fee payer's left as zeros (the signature order is the accounts' order).
  const signature = await signBytes(solana.signer.keyPair.privateKey, messageBytes);
  const transaction = {
    messageBytes: messageBytes as unknown as Transaction['messageBytes'],
    signatures: { [feePayer]: null, [solana.signer.address]: signature },
  } as Transaction;
  return getBase64EncodedWireTransaction(transaction);
}

/**
 * solders' legacy Message.new_with_blockhash (solana-sdk's CompiledKeys): the fee payer, then
 * writable signers, readonly signers, writable and readonly non-signers, each group ordered by the
 * accounts' bytes (a BTreeMap of public keys), where kit orders them by their base58 text.
 */
function soldersLegacyMessage(feePayer: Address, instructions: Instruction[], blockhash: Blockhash): Uint8Array {
  const metas = new Map<Address, { signer: boolean; writable: boolean }>();
  for (const instruction of instructions) {
    if (!metas.has(instruction.programAddress))
      metas.set(instruction.programAddress, { signer: false, writable: false });
    for (const account of instruction.accounts ?? []) {
      const meta = metas.get(account.address) ?? { signer: false, writable: false };
      metas.set(account.address, {
        signer: meta.signer || isSignerRole(account.role),
        writable: meta.writable || isWritableRole(account.role),
      });
    }
  }
  metas.delete(feePayer);
  const bytesOf = getAddressEncoder();
  const sorted = [...metas].sort(([left], [right]) =>
    Buffer.compare(Buffer.from(bytesOf.encode(left)), Buffer.from(bytesOf.encode(right))),
  );
  const group = (signer: boolean, writable: boolean) =>
    sorted.filter(([, meta]) => meta.signer === signer && meta.writable === writable).map(([address]) => address);
  const [writableSigners, readonlySigners, writable, readonly] = [
    group(true, true),
    group(true, false),
    group(false, true),
    group(false, false),
  ];
  const staticAccounts = [feePayer, ...writableSigners, ...readonlySigners, ...writable, ...readonly];
  const indexOf = (address: Address) => staticAccounts.indexOf(address);
  return new Uint8Array(
    getCompiledTransactionMessageEncoder().encode({
      version: 'legacy',
      header: {
        numSignerAccounts: 1 + writableSigners.length + readonlySigners.length,
        numReadonlySignerAccounts: readonlySigners.length,
        numReadonlyNonSignerAccounts: readonly.length,
      },
      staticAccounts,
      lifetimeToken: blockhash,
      instructions: instructions.map((instruction) => ({
        programAddressIndex: indexOf(instruction.programAddress),
        accountIndices: (instruction.accounts ?? []).map((account) => indexOf(account.address)),
        data: instruction.data,
      })),
    }),
  );
}

/** What python-requests adds to every request of a session. */
const REQUESTS_HEADERS: Array<[string, string]> = [
  ['User-Agent', 'python-requests/2.32.3'],
  ['Accept-Encoding', 'gzip, deflate'],
  ['Accept', '*/*'],
  ['Connection', 'keep-alive'],
];

async function send(
  method: string,
  url: string,
  headers: Array<[string, string]>,
  body: string | undefined,
): Promise<ContractResponse> {
  const target = new URL(url);
  const raw = await new Promise<{ status: number; headers: http.IncomingHttpHeaders; bytes: Buffer }>(
    (resolve, reject) => {
      const request = http.request(
        { method, host: target.hostname, port: target.port, path: `${target.pathname}${target.search}`, agent: false },
        (response) => {
          const chunks: Buffer[] = [];
          response.on('data', (chunk: Buffer) => chunks.push(chunk));
          response.on('end', () =>
            resolve({ status: response.statusCode ?? 0, headers: response.headers, bytes: Buffer.concat(chunks) }),
          );
          response.on('error', reject);
        },
      );
      request.on('error', reject);
      // setHeader keeps the name's case on the wire.
      for (const [name, value] of headers) request.setHeader(name, value);
      if (body !== undefined) request.setHeader('Content-Length', Buffer.byteLength(body));
      request.end(body);
    },
  );
  const encoding = raw.headers['content-encoding'] ?? '';
  const bytes =
    encoding === 'gzip' ? gunzipSync(raw.bytes) : encoding === 'deflate' ? inflateSync(raw.bytes) : raw.bytes;
  const text = bytes.toString('utf8');
  const responseHeaders = new Headers();
  for (const [name, value] of Object.entries(raw.headers)) {
    if (value === undefined) continue;
    for (const item of Array.isArray(value) ? value : [value]) responseHeaders.append(name, item);
  }
  const contentType = (responseHeaders.get('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
  const parsed = contentType === 'application/json' && text !== '' ? JSON.parse(text) : text;
  const response: ContractResponse = {
    status: raw.status,
    headers: responseHeaders,
    body: parsed,
    text,
    operationId: undefined,
  };
  await checkResponse(method, `${target.pathname}${target.search}`, response);
  return response;
}
