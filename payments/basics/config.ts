/**
 * Configuration of the service, read from the environment once at start.
 *
 * The variable names are part of the interface (the README's configuration table): operators and scripts rely
 * on them. A wrong value stops the service with a message naming the variable. The parsed object
 * is plain data, passed to whoever needs it; nothing reads process.env after start.
 */
import {
  aliasesOf,
  CHAIN_FAMILIES,
  configuredNetwork,
  DEFAULT_NETWORK_NAMES,
  NETWORK_TABLE,
  type ChainType,
  type FinalityRule,
  type NetworkClass,
  type NetworkName,
  NETWORK_NAMES,
  usualNamesOf,
} from './networkTable';
import { parseAllowHosts, type AllowHosts } from './http/index';
import { SECP256K1_IMPLEMENTATIONS, type Secp256k1Name } from './secp256k1';
import { isFacilitatorAuthError, parseFacilitatorAuth, type FacilitatorAuth } from './facilitatorAuth';

export interface NetworkSettings {
  name: NetworkName;
  rpcUrl: string;
  /** The variable rpcUrl was read from (RPC_URL_<NAME>); absent when it is the row's public endpoint. */
  rpcVariable?: string;
  usdc: string;
  /** FINALITY_DEPTH_<NAME>: a depth in blocks in place of the row's finality rule (absent: the row's). */
  finality?: FinalityRule;
}

/** The finality rule of an enabled network: its configured depth, else its row's. */
export function finalityRuleOf(networks: readonly NetworkSettings[], network: NetworkName): FinalityRule {
  return networks.find((settings) => settings.name === network)?.finality ?? NETWORK_TABLE[network].finality;
}

export interface Config {
  port: number;
  host: string;
  databaseUrl: string | undefined;
  dataDir: string;
  nodeEnv: string;
  networks: NetworkSettings[];
  evmPrivateKey: string | undefined;
  solanaPrivateKey: string | undefined;
  facilitatorUrl: string | undefined;
  /** CDP_API_KEY_ID and CDP_API_KEY_SECRET, FACILITATOR_HEADERS: how we authenticate to the facilitator (facilitatorAuth.ts). */
  facilitatorAuth: FacilitatorAuth | undefined;
  /** Normalised host:port pairs exempt from the private-address guard. */
  ssrfAllowHosts: AllowHosts;
  relayFeePercent: number;
  relayFeeMinUsdc: string;
  proxyFeePercent: number;
  /** The most the service wallet pays a target for one /proxy call, in USDC (decimal text). */
  proxyMaxPaymentUsdc: string;
  /** The longest an EVM authorization we sign for a target stays valid; shorter when the target asks. */
  proxyPaymentWindowSeconds: number;
  /** The longest an EVM authorization we sign for a relay's target stays valid: a target that never charges is refunded after it. */
  relayPaymentWindowSeconds: number;
  /**
   * A relay transaction its request has not finished this long after it was recorded is finished
   * by a job (the request is presumed gone: the client is refunded unless the target was paid).
   */
  relayAbandonedAfterMs: number;
  relayDailyPerWalletUsd: number;
  relayDailyTotalUsd: number;
  /** A channel we open to a batch-settlement target is funded with this many times its price (at least its announced minimum). */
  payerChannelDepositMultiplier: number;
  /** The most one deposit into one of our channels moves, in USDC (decimal text); a target asking more is not paid by channel. */
  payerChannelMaxDepositUsdc: string;
  /** A channel of ours unused this long (and with no voucher left undecided) is refunded by its seller or withdrawn. */
  payerChannelIdleSeconds: number;
  /**
   * The most the maxima of a wallet's upto permits admitted on /relay and not yet settled or ended
   * may add up to, in USDC (decimal text): what one payer can cost us by revoking, once.
   */
  /**
   * /relay paid through batch-settlement channels (payments/incoming/channels/): the networks we
   * offer it on (CHANNEL_RECEIVER_NETWORKS, none by default; each an enabled EVM network holding the
   * x402BatchSettlement contract), the withdraw delay our 402 asks for, the minimum first deposit
   * as a multiple of the price, how long a channel's mirrored chain state is trusted, and when the
   * worker claims: once unclaimed charges on a network reach the threshold, or the oldest is the
   * period old, and at once when a payer has started a withdrawal.
   */
  receiverChannels: {
    networks: NetworkName[];
    withdrawDelaySeconds: number;
    minDepositMultiplier: number;
    onchainTtlSeconds: number;
    claimThresholdUsdc: string;
    claimPeriodSeconds: number;
  };
  relayUptoExposurePerWalletUsdc: string;
  /** The same for every payer together, per network class: what the service can be owed by upto at any moment. */
  relayUptoExposureTotalUsdc: string;
  proxyDailyPerAccountUsd: number;
  proxyDailyTotalUsd: number;
  capRelay: number;
  capProxy: number;
  capWebhooks: number;
  targetTimeoutMs: number;
  asyncThresholdMs: number;
  /** Bound on each JSON-RPC request to a chain (EVM and Solana): past it the node counts as unavailable. */
  rpcTimeoutMs: number;
  /** Connections this process's API pool opens to Postgres at most (the worker's pool is its concurrency + 2). */
  databasePoolMax: number;
  /** GET /discovery/resources: 'public' serves the list of resources this service has paid; 'off' answers 404. */
  discovery: 'public' | 'off';
  llm: {
    baseUrl: string | undefined;
    apiKey: string | undefined;
    model: string | undefined;
    priceUsdc: string;
    maxTokens: number;
  };
  logLevel: string;
  /** LOG_FORMAT: json or pretty lines; unset: pretty on a terminal, JSON elsewhere. */
  logFormat: 'json' | 'pretty' | undefined;
  runWorker: boolean;
  /** `npm run worker` serves /health/live, /health/ready and /metrics on this port (on HOST) when set. */
  workerPort: number | undefined;
  shutdownGraceMs: number;
  publicBaseUrl: string | undefined;
  requestTimeoutMs: number;
  headersTimeoutMs: number;
  keepAliveTimeoutMs: number;
  /**
   * How long a valid API key is kept in memory (0: never). Changes to keys reach every instance
   * through Postgres notifications at once; while they cannot, nothing is served from memory.
   */
  apiKeyCacheMs: number;
  /**
   * How long a paid call claimed under an Idempotency-Key (or a payment) stays its instance's
   * without a renewal; the instance renews every third of it. A repeat finding the lease lapsed
   * knows the process died and answers from the call's money records.
   */
  idempotencyLeaseMs: number;
  /** SECP256K1_IMPLEMENTATION: forces one (native, wasm, noble); unset: the fastest that loads. */
  secp256k1Implementation: Secp256k1Name | undefined;
  /** FLOAT_REFRESH_SECONDS: how often a job reads our wallet's stablecoin and gas on every enabled network. */
  floatRefreshSeconds: number;
  /** Per enabled network, the floors under which /relay and /proxy refuse with 503 (payments/tracking/floorCheck.ts). */
  walletFloors: Partial<Record<NetworkName, WalletFloor>>;
}

/**
 * A network's floors, as configured: the stablecoin in USDC (decimal text, FLOAT_FLOOR_USDC_<NETWORK>)
 * and the gas token in its whole units (decimal text: ETH or the chain's own token, SOL;
 * GAS_FLOOR_<NETWORK>), each with the variable that sets it (named in a refusal).
 */
export interface WalletFloor {
  assetUsdc: string;
  assetVariable: string;
  gas: string;
  gasVariable: string;
}

/** The floors when no variable sets them: mainnets only; a testnet has none (0) unless set. */
export const DEFAULT_FLOAT_FLOOR_USDC: Record<NetworkClass, string> = { mainnet: '10', testnet: '0' };
export const DEFAULT_GAS_FLOOR: Record<NetworkClass, Record<ChainType, string>> = {
  mainnet: { evm: '0.001', solana: '0.01' },
  testnet: { evm: '0', solana: '0' },
};
/** Decimals of each family's gas token (wei per ETH, lamports per SOL). */
export const GAS_DECIMALS: Record<ChainType, number> = { evm: 18, solana: 9 };

function walletFloors(env: Env, networks: readonly NetworkSettings[]): Partial<Record<NetworkName, WalletFloor>> {
  const floors: Partial<Record<NetworkName, WalletFloor>> = {};
  for (const { name } of networks) {
    const { networkClass, chainType } = NETWORK_TABLE[name];
    const asset = networkVariable(env, 'FLOAT_FLOOR_USDC_', name);
    const gas = networkVariable(env, 'GAS_FLOOR_', name);
    floors[name] = {
      assetUsdc: decimal(env, asset.variable, DEFAULT_FLOAT_FLOOR_USDC[networkClass], 6),
      assetVariable: asset.variable,
      gas: decimal(env, gas.variable, DEFAULT_GAS_FLOOR[networkClass][chainType], GAS_DECIMALS[chainType]),
      gasVariable: gas.variable,
    };
  }
  return floors;
}

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    problem: string,
  ) {
    super(`${variable}: ${problem}`);
  }
}

type Env = Record<string, string | undefined>;

function text(env: Env, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value.trim() === '' ? undefined : value.trim();
}

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = text(env, name);
  if (raw === undefined) return fallback;
  if (!/^[0-9]+$/.test(raw)) throw new ConfigError(name, `expected a whole number, got "${raw}"`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(name, `expected a value from ${min} to ${max}, got ${value}`);
  return value;
}

function decimal(env: Env, name: string, fallback: string, maxFractionDigits: number): string {
  const raw = text(env, name) ?? fallback;
  const pattern = new RegExp(`^[0-9]+(\\.[0-9]{1,${maxFractionDigits}})?$`);
  if (!pattern.test(raw)) {
    throw new ConfigError(
      name,
      `expected a non-negative decimal with at most ${maxFractionDigits} decimals, got "${raw}"`,
    );
  }
  return raw;
}

function percent(env: Env, name: string, fallback: number): number {
  const raw = decimal(env, name, String(fallback), 2);
  const value = Number(raw);
  if (value > 100) throw new ConfigError(name, `expected at most 100, got ${raw}`);
  return value;
}

/**
 * The scheme and host name of a URL, for an error message about it: credentials, port, path and
 * query are left out, since a secret often lives in one of them. A URL that cannot be parsed shows
 * its scheme alone: where its host ends is a guess (a password without "@host" after it reads as a
 * port, and a password may hold a "/").
 */
export function urlShownPart(raw: string): string | undefined {
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(raw)?.[1];
  if (scheme === undefined) return undefined;
  let hostname = '';
  try {
    hostname = new URL(raw).hostname;
  } catch {
    // Not parsed: the scheme alone.
  }
  return `${scheme}://${hostname}`;
}

/** What is wrong with a URL that `new URL` refused, told without repeating it. */
function whyNotAUrl(raw: string): string {
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(raw)) return 'does not start with a scheme such as https://';
  const authority = /^[a-z][a-z0-9+.-]*:\/\/(?:[^@/?#]*@)?([^/?#]*)/i.exec(raw)?.[1] ?? '';
  if (authority === '') return 'has no host';
  const port = /:([^:\]]*)$/.exec(authority)?.[1];
  if (port !== undefined && port !== '' && !(/^[0-9]+$/.test(port) && Number(port) <= 65535)) {
    return 'has a port that is not a number from 0 to 65535 (or a user name and password with no "@host" after them)';
  }
  return 'is not a valid URL (a space, or a character that must be percent-encoded?)';
}

/** `raw` as a URL with a scheme:// and a host, or the ConfigError that says why not. */
function parsedUrl(name: string, raw: string): URL {
  // Without "://", `new URL` reads "user:password@host" as the scheme "user:" and a path.
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(raw)) throw urlError(name, raw, whyNotAUrl(raw));
  let parsed: URL;
  try {
    parsed = new URL(raw);
  } catch {
    throw urlError(name, raw, whyNotAUrl(raw));
  }
  return parsed;
}

/** `NAME: <problem> (<scheme://host>)`: the variable, what is wrong, and at most its scheme and host name. */
function urlError(name: string, raw: string, problem: string): ConfigError {
  const shown = urlShownPart(raw);
  return new ConfigError(name, shown === undefined ? problem : `${problem} (${shown})`);
}

interface UrlRules {
  /** 'refused' for a URL whose user and password would be shown or sent where they should not be. */
  credentials?: 'allowed' | 'refused';
  /**
   * 'refused' for a base URL the service appends paths to (`/settle`, `/chat/completions`): a query
   * string or a fragment would end up before the path (`...?k=v/settle`).
   */
  queryAndFragment?: 'allowed' | 'refused';
}

/**
 * An http or https URL. Errors name the variable and what is wrong, never the value: a URL may
 * carry credentials, or an API key in its path or query.
 */
function url(env: Env, name: string, rules: UrlRules = {}): string | undefined {
  const raw = text(env, name);
  if (raw === undefined) return undefined;
  const parsed = parsedUrl(name, raw);
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw urlError(name, raw, 'expected an http or https URL');
  }
  if (parsed.host === '') throw urlError(name, raw, 'has no host');
  if (rules.credentials === 'refused' && (parsed.username !== '' || parsed.password !== '')) {
    throw urlError(name, raw, 'must not carry a user name or password');
  }
  // A "?" or "#" of a parsed URL always starts its query or fragment, even an empty one.
  if (rules.queryAndFragment === 'refused' && /[?#]/.test(raw)) {
    throw urlError(
      name,
      raw,
      'must not carry a query string or a fragment: the service appends paths to it (such as /settle), which would land after them',
    );
  }
  return raw.replace(/\/+$/, '');
}

/** DATABASE_URL: a postgres:// (or postgresql://) URL; errors never repeat it. */
function databaseUrl(env: Env): string | undefined {
  const raw = text(env, 'DATABASE_URL');
  if (raw === undefined) return undefined;
  const parsed = parsedUrl('DATABASE_URL', raw);
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:') {
    throw urlError('DATABASE_URL', raw, 'expected a postgres:// URL');
  }
  return raw;
}

/** The suffix of a network's variables: its name in capitals, each other character an underscore (EIP155_42161). */
export function envSuffix(network: string): string {
  return network.toUpperCase().replace(/[^A-Z0-9]/g, '_');
}

/**
 * The network's variable of this prefix (RPC_URL_, USDC_ADDRESS_, FINALITY_DEPTH_) that is set, by
 * our name or by another name of the network (RPC_URL_ARBITRUM_SEPOLIA for eip155:421614): its
 * name and value, or the first name with no value. Two names set to different values are refused.
 */
function networkVariable(env: Env, prefix: string, network: NetworkName): { variable: string; value?: string } {
  const names = [network, ...usualNamesOf(network), ...aliasesOf(network)].map((name) => `${prefix}${envSuffix(name)}`);
  const set = [...new Set(names)].filter((variable) => text(env, variable) !== undefined);
  const first = set[0];
  if (first === undefined) return { variable: names[0] ?? `${prefix}${envSuffix(network)}` };
  const value = text(env, first);
  const other = set.find((variable) => text(env, variable) !== value);
  if (other !== undefined) throw new ConfigError(other, `names ${network} as ${first} does, with another value`);
  return { variable: first, ...(value === undefined ? {} : { value }) };
}

/** Every network configuration knows, by its names beside its CAIP-2 id, for an error message. */
function knownNetworks(): string {
  return NETWORK_NAMES.map((network) => {
    const { caip2 } = NETWORK_TABLE[network];
    const names = [...usualNamesOf(network), ...aliasesOf(network)];
    const shown = network === caip2 ? names : [network, ...names];
    return shown.length === 0 ? caip2 : `${shown.join(' or ')} (${caip2})`;
  }).join(', ');
}

/** CHANNEL_RECEIVER_NETWORKS: enabled EVM networks, by any of their names; none when unset. */
function receiverChannelNetworks(env: Env, networks: readonly NetworkSettings[]): NetworkName[] {
  const raw = text(env, 'CHANNEL_RECEIVER_NETWORKS');
  if (raw === undefined) return [];
  return raw
    .split(',')
    .map((name) => name.trim())
    .filter(Boolean)
    .map((name) => {
      const network = configuredNetwork(name);
      if (network === undefined || !networks.some((settings) => settings.name === network))
        throw new ConfigError('CHANNEL_RECEIVER_NETWORKS', `"${name}" is not an enabled network`);
      // Channel deposits are taken through the ERC-3009 or the Permit2 deposit collector.
      const { transferMethod } = NETWORK_TABLE[network];
      if (transferMethod !== 'eip3009' && transferMethod !== 'permit2')
        throw new ConfigError(
          'CHANNEL_RECEIVER_NETWORKS',
          `"${name}" moves its stablecoin by neither EIP-3009 nor Permit2, which channel deposits need`,
        );
      return network;
    });
}

function parseNetworks(env: Env): NetworkSettings[] {
  const raw = text(env, 'NETWORKS');
  const names =
    raw === undefined
      ? [...DEFAULT_NETWORK_NAMES]
      : raw
          .split(',')
          .map((name) => name.trim())
          .filter(Boolean);
  if (names.length === 0) throw new ConfigError('NETWORKS', 'names no network');
  const seen = new Set<string>();
  return names.map((name) => {
    const network = configuredNetwork(name);
    if (network === undefined) {
      throw new ConfigError(
        'NETWORKS',
        `unknown network "${name}"; known (by a name or by the CAIP-2 id in brackets): ${knownNetworks()}`,
      );
    }
    if (seen.has(network)) throw new ConfigError('NETWORKS', `network "${network}" is listed twice`);
    seen.add(network);
    const entry = NETWORK_TABLE[network];
    const { variable: usdcVariable, value: usdcSet } = networkVariable(env, 'USDC_ADDRESS_', network);
    const usdc = usdcSet ?? entry.usdc;
    if (!CHAIN_FAMILIES[entry.chainType].addressPattern.test(usdc))
      throw new ConfigError(usdcVariable, `not a valid ${entry.chainType} address: "${usdc}"`);
    const { variable: rpcVariable, value: rpcSet } = networkVariable(env, 'RPC_URL_', network);
    const rpcUrl = (rpcSet === undefined ? undefined : url(env, rpcVariable)) ?? entry.publicRpcUrl;
    if (rpcUrl === undefined) {
      throw new ConfigError(
        rpcVariable,
        `is required: NETWORKS enables ${network} (${entry.label}), which has no public RPC endpoint we know of`,
      );
    }
    const { variable: depthVariable, value: depth } = networkVariable(env, 'FINALITY_DEPTH_', network);
    let finality: FinalityRule | undefined;
    if (depth !== undefined) {
      if ('commitment' in entry.finality)
        throw new ConfigError(depthVariable, `${network} is final at a commitment, not at a depth in blocks`);
      if (!/^[1-9][0-9]{0,5}$/.test(depth))
        throw new ConfigError(depthVariable, 'must be a whole number of blocks, 1 or more');
      finality = { blocks: Number(depth), watchSeconds: entry.finality.watchSeconds };
    }
    return {
      name: network,
      rpcUrl,
      ...(rpcSet === undefined ? {} : { rpcVariable }),
      usdc,
      ...(finality ? { finality } : {}),
    };
  });
}

function hostList(env: Env, name: string): AllowHosts {
  const parsed = parseAllowHosts(text(env, name) ?? '');
  if (!parsed.ok) throw new ConfigError(name, parsed.details);
  return parsed.value;
}

function flag(env: Env, name: string, fallback: boolean): boolean {
  const raw = text(env, name);
  if (raw === undefined) return fallback;
  if (/^(1|true|yes|on)$/i.test(raw)) return true;
  if (/^(0|false|no|off)$/i.test(raw)) return false;
  throw new ConfigError(name, `expected true or false, got "${raw}"`);
}

function oneOf<T extends string>(env: Env, name: string, values: readonly T[]): T | undefined {
  const raw = text(env, name);
  if (raw === undefined) return undefined;
  if (!(values as readonly string[]).includes(raw)) throw new ConfigError(name, `expected one of ${values.join(', ')}`);
  return raw as T;
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

function discovery(env: Env): 'public' | 'off' {
  const value = text(env, 'DISCOVERY') ?? 'off';
  if (value !== 'public' && value !== 'off') throw new ConfigError('DISCOVERY', 'expected public or off');
  return value;
}

function facilitatorAuthOf(env: Env, facilitatorUrl: string | undefined): FacilitatorAuth | undefined {
  const auth = parseFacilitatorAuth(env, facilitatorUrl);
  if (isFacilitatorAuthError(auth)) throw new ConfigError(auth.variable, auth.problem);
  return auth;
}

export function loadConfig(env: Env = process.env): Config {
  const facilitatorUrl = url(env, 'FACILITATOR_URL', { queryAndFragment: 'refused' });
  const facilitatorAuth = facilitatorAuthOf(env, facilitatorUrl);
  const logLevel = text(env, 'LOG_LEVEL') ?? 'info';
  if (!LOG_LEVELS.includes(logLevel)) throw new ConfigError('LOG_LEVEL', `expected one of ${LOG_LEVELS.join(', ')}`);
  const evmPrivateKey = text(env, 'EVM_PRIVATE_KEY');
  if (evmPrivateKey !== undefined && !/^(0x)?[0-9a-fA-F]{64}$/.test(evmPrivateKey)) {
    throw new ConfigError('EVM_PRIVATE_KEY', 'expected 32 bytes of hex');
  }
  const solanaPrivateKey = text(env, 'SOLANA_PRIVATE_KEY');
  if (solanaPrivateKey !== undefined && !/^(\[[0-9,\s]+\]|[1-9A-HJ-NP-Za-km-z]{64,90})$/.test(solanaPrivateKey)) {
    throw new ConfigError('SOLANA_PRIVATE_KEY', 'expected base58 or a JSON byte array');
  }
  const networks = parseNetworks(env);
  return {
    port: integer(env, 'PORT', 3000, 0, 65535),
    host: text(env, 'HOST') ?? '127.0.0.1',
    databaseUrl: databaseUrl(env),
    dataDir: text(env, 'DATA_DIR') ?? './.data',
    nodeEnv: text(env, 'NODE_ENV') ?? 'development',
    networks,
    evmPrivateKey:
      evmPrivateKey === undefined ? undefined : evmPrivateKey.startsWith('0x') ? evmPrivateKey : `0x${evmPrivateKey}`,
    solanaPrivateKey,
    facilitatorUrl,
    facilitatorAuth,
    ssrfAllowHosts: hostList(env, 'SSRF_ALLOW_HOSTS'),
    relayFeePercent: percent(env, 'RELAY_FEE_PERCENT', 3),
    relayFeeMinUsdc: decimal(env, 'RELAY_FEE_MIN_USDC', '0', 6),
    proxyFeePercent: percent(env, 'PROXY_FEE_PERCENT', 3),
    proxyMaxPaymentUsdc: decimal(env, 'PROXY_MAX_PAYMENT_USDC', '10', 6),
    proxyPaymentWindowSeconds: integer(env, 'PROXY_PAYMENT_WINDOW_SECONDS', 600, 10, 3600),
    relayPaymentWindowSeconds: integer(env, 'RELAY_PAYMENT_WINDOW_SECONDS', 120, 10, 3600),
    relayAbandonedAfterMs: integer(env, 'RELAY_ABANDONED_AFTER_MS', 300_000, 1_000, 86_400_000),
    relayDailyPerWalletUsd: integer(env, 'RELAY_DAILY_PER_WALLET_USD', 100, 0, 1e12),
    relayDailyTotalUsd: integer(env, 'RELAY_DAILY_TOTAL_USD', 1000, 0, 1e12),
    payerChannelDepositMultiplier: integer(env, 'PAYER_CHANNEL_DEPOSIT_MULTIPLIER', 10, 1, 1_000),
    payerChannelMaxDepositUsdc: decimal(env, 'PAYER_CHANNEL_MAX_DEPOSIT_USDC', '1', 6),
    payerChannelIdleSeconds: integer(env, 'PAYER_CHANNEL_IDLE_SECONDS', 86_400, 60, 31_536_000),
    receiverChannels: {
      networks: receiverChannelNetworks(env, networks),
      withdrawDelaySeconds: integer(env, 'CHANNEL_RECEIVER_WITHDRAW_DELAY_SECONDS', 86_400, 900, 2_592_000),
      minDepositMultiplier: integer(env, 'CHANNEL_RECEIVER_MIN_DEPOSIT_MULTIPLIER', 10, 1, 1_000_000),
      onchainTtlSeconds: integer(env, 'CHANNEL_RECEIVER_ONCHAIN_TTL_SECONDS', 60, 1, 3_600),
      claimThresholdUsdc: decimal(env, 'CHANNEL_RECEIVER_CLAIM_THRESHOLD_USDC', '1', 6),
      claimPeriodSeconds: integer(env, 'CHANNEL_RECEIVER_CLAIM_PERIOD_SECONDS', 3_600, 10, 604_800),
    },
    relayUptoExposurePerWalletUsdc: decimal(env, 'RELAY_UPTO_EXPOSURE_PER_WALLET_USDC', '5', 6),
    relayUptoExposureTotalUsdc: decimal(env, 'RELAY_UPTO_EXPOSURE_TOTAL_USDC', '100', 6),
    proxyDailyPerAccountUsd: integer(env, 'PROXY_DAILY_PER_ACCOUNT_USD', 500, 0, 1e12),
    proxyDailyTotalUsd: integer(env, 'PROXY_DAILY_TOTAL_USD', 5000, 0, 1e12),
    capRelay: integer(env, 'CAP_RELAY', 50, 1, 100_000),
    capProxy: integer(env, 'CAP_PROXY', 100, 1, 100_000),
    capWebhooks: integer(env, 'CAP_WEBHOOKS', 200, 1, 100_000),
    targetTimeoutMs: integer(env, 'TARGET_TIMEOUT_MS', 120_000, 100, 600_000),
    asyncThresholdMs: integer(env, 'ASYNC_THRESHOLD_MS', 30_000, 100, 600_000),
    rpcTimeoutMs: integer(env, 'RPC_TIMEOUT_MS', 10_000, 100, 120_000),
    databasePoolMax: integer(env, 'DATABASE_POOL_MAX', 20, 2, 1_000),
    discovery: discovery(env),
    llm: {
      baseUrl: url(env, 'LLM_BASE_URL', { credentials: 'refused', queryAndFragment: 'refused' }),
      apiKey: text(env, 'LLM_API_KEY'),
      model: text(env, 'LLM_MODEL'),
      priceUsdc: decimal(env, 'LLM_PRICE_USDC', '0.01', 6),
      maxTokens: integer(env, 'LLM_MAX_TOKENS', 1024, 1, 1_000_000),
    },
    logLevel,
    logFormat: oneOf(env, 'LOG_FORMAT', ['json', 'pretty'] as const),
    runWorker: flag(env, 'RUN_WORKER', true),
    workerPort: text(env, 'WORKER_PORT') === undefined ? undefined : integer(env, 'WORKER_PORT', 0, 0, 65535),
    shutdownGraceMs: integer(env, 'SHUTDOWN_GRACE_MS', 10_000, 0, 600_000),
    publicBaseUrl: url(env, 'PUBLIC_BASE_URL', { credentials: 'refused', queryAndFragment: 'refused' }),
    requestTimeoutMs: integer(env, 'REQUEST_TIMEOUT_MS', 600_000, 1000, 3_600_000),
    headersTimeoutMs: integer(env, 'HEADERS_TIMEOUT_MS', 610_000, 1000, 3_600_000),
    keepAliveTimeoutMs: integer(env, 'KEEP_ALIVE_TIMEOUT_MS', 620_000, 1000, 3_600_000),
    apiKeyCacheMs: integer(env, 'API_KEY_CACHE_MS', 30_000, 0, 3_600_000),
    idempotencyLeaseMs: integer(env, 'IDEMPOTENCY_LEASE_MS', 30_000, 1_000, 600_000),
    secp256k1Implementation: oneOf(env, 'SECP256K1_IMPLEMENTATION', SECP256K1_IMPLEMENTATIONS),
    floatRefreshSeconds: integer(env, 'FLOAT_REFRESH_SECONDS', 60, 1, 3600),
    walletFloors: walletFloors(env, networks),
  };
}

/** The host part of an RPC URL, without scheme, credentials, path or query (API keys often live there). */
export function rpcHost(rpcUrl: string): string {
  try {
    return new URL(rpcUrl).host;
  } catch {
    return '';
  }
}

/**
 * What NODE_ENV=production demands beyond a valid configuration: a wallet key for each chain type
 * that is enabled, and a database named by DATABASE_URL. The embedded Postgres is a convenience for
 * development; in production it starts only when EMBEDDED_POSTGRES=allow says it is wanted.
 */
export function checkProductionConfig(config: Config, env: Env): void {
  if (config.nodeEnv !== 'production') return;
  const enabledFamilies = new Set<string>(config.networks.map((network) => NETWORK_TABLE[network.name].chainType));
  for (const [family, { keyVariable, keySetting, enabledText }] of Object.entries(CHAIN_FAMILIES)) {
    if (enabledFamilies.has(family) && !config[keySetting])
      throw new ConfigError(keyVariable, `is required in production when ${enabledText} is enabled`);
  }
  if (!config.databaseUrl && text(env, 'EMBEDDED_POSTGRES') !== 'allow') {
    throw new ConfigError(
      'DATABASE_URL',
      'is required in production (set EMBEDDED_POSTGRES=allow to run the embedded Postgres in DATA_DIR instead)',
    );
  }
}
