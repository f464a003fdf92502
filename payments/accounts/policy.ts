/**
 * The price a caller lets a target ask, and an API key's policy: checked before anything is paid,
 * signed or charged. A call's ceiling is its `max_amount`, else its key's default maximum; a key's
 * hard maximum binds every call of the key whatever it names; a key's allowed hosts bound the
 * targets it may call at all (checked before the target is called). Pure: no database, no clock.
 */

/** A key's rules (null: no such rule). Amounts in micro-USDC (atomic units of USDC). */
export interface KeyPolicy {
  defaultMaxMicroUsdc: bigint | null;
  hardMaxMicroUsdc: bigint | null;
  /** Host name suffixes (`example.org` allows `api.example.org`), or exact `host:port` entries. */
  allowedHosts: readonly string[] | null;
}

export const NO_POLICY: KeyPolicy = { defaultMaxMicroUsdc: null, hardMaxMicroUsdc: null, allowedHosts: null };

/** What a caller set for one call: its `max_amount`, and its key's policy on /proxy. */
export interface CallLimits {
  maxAmountMicroUsdc?: bigint;
  policy?: KeyPolicy;
  /** The key's prefix, to name it in a refusal. */
  keyPrefix?: string;
}

export type PriceAboveLimit = {
  kind: 'price_above_limit';
  details: string;
  priceMicroUsdc: bigint;
  maxAmountMicroUsdc: bigint;
  network: string;
};
export type LimitRefusal = { kind: 'policy_refused'; details: string } | PriceAboveLimit;

/** `max_amount` of a request body (a decimal string the document's pattern has checked), or undefined. */
export function maxAmountOf(body: { max_amount?: string }): bigint | undefined {
  return body.max_amount === undefined ? undefined : BigInt(body.max_amount);
}

function hostMatches(entry: string, url: URL): boolean {
  const rule = entry.toLowerCase();
  const hostname = url.hostname.toLowerCase().replace(/^\[|\]$/g, '');
  // An entry with a port names one host:port exactly (the URL's default port counted).
  const port = url.port || (url.protocol === 'https:' ? '443' : '80');
  const withPort = /^([^:[\]]+):([0-9]{1,5})$/.exec(rule);
  if (withPort) return hostname === withPort[1] && port === withPort[2];
  const suffix = rule.replace(/^\.+/, '');
  return hostname === suffix || hostname.endsWith(`.${suffix}`);
}

/** Refuses a target whose host the key's policy does not allow; undefined when it may be called. */
export function hostRefusal(limits: CallLimits, apiUrl: string): LimitRefusal | undefined {
  const allowed = limits.policy?.allowedHosts;
  if (!allowed) return undefined;
  let url: URL;
  try {
    url = new URL(apiUrl);
  } catch {
    // The outbound guard refuses a malformed URL with its own 400.
    return undefined;
  }
  if (allowed.some((entry) => hostMatches(entry, url))) return undefined;
  return {
    kind: 'policy_refused',
    details: `The API key ${limits.keyPrefix ?? ''} may call only hosts matching ${allowed.join(', ')}; ${url.host} is not one. The target was not called.`,
  };
}

/**
 * Refuses a price above the key's hard maximum (policy_refused) or above the call's ceiling
 * (price_above_limit); undefined when the price may be paid.
 */
export function priceRefusal(limits: CallLimits, priceMicroUsdc: bigint, network: string): LimitRefusal | undefined {
  const hardMax = limits.policy?.hardMaxMicroUsdc ?? null;
  if (hardMax !== null && priceMicroUsdc > hardMax) {
    return {
      kind: 'policy_refused',
      details: `The target asks ${priceMicroUsdc} atomic units of USDC on ${network}; the API key ${limits.keyPrefix ?? ''} may pay at most ${hardMax} per call. Nothing was paid.`,
    };
  }
  const ceiling = limits.maxAmountMicroUsdc ?? limits.policy?.defaultMaxMicroUsdc ?? undefined;
  const whose = limits.maxAmountMicroUsdc === undefined ? "the API key's default maximum" : 'max_amount';
  return ceilingRefusal(ceiling, priceMicroUsdc, network, whose);
}

/** Refuses a price above a call's ceiling (none: undefined); undefined when it may be paid. */
export function ceilingRefusal(
  ceilingMicroUsdc: bigint | undefined,
  priceMicroUsdc: bigint,
  network: string,
  whose = 'max_amount',
): PriceAboveLimit | undefined {
  if (ceilingMicroUsdc === undefined || priceMicroUsdc <= ceilingMicroUsdc) return undefined;
  return {
    kind: 'price_above_limit',
    details: `The target asks ${priceMicroUsdc} atomic units of USDC on ${network}; the ceiling of this call (${whose}) is ${ceilingMicroUsdc}. Nothing was paid.`,
    priceMicroUsdc,
    maxAmountMicroUsdc: ceilingMicroUsdc,
    network,
  };
}
