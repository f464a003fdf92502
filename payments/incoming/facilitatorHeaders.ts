/**
 * The headers that authenticate one request to the facilitator (payments/basics/facilitatorAuth.ts).
 *
 * FACILITATOR_HEADERS go out as configured. A CDP API key signs a new JWT for each request through
 * @coinbase/x402's createAuthHeader: CDP's JWT lives two minutes and names the one method, host
 * and path it is for (`uris: ["POST api.cdp.coinbase.com/platform/v2/x402/settle"]`), so it is
 * never reused across paths or kept. @coinbase/x402 (and the CDP SDK under it) is loaded on the
 * first such request only: an instance without a CDP key never pays for loading it.
 */
import type { FacilitatorAuth } from '../basics/facilitatorAuth';

type CoinbaseX402 = typeof import('@coinbase/x402');
let coinbase: Promise<CoinbaseX402> | undefined;

function coinbaseX402(): Promise<CoinbaseX402> {
  coinbase ??= import('@coinbase/x402').catch((error: unknown) => {
    coinbase = undefined;
    throw error;
  });
  return coinbase;
}

/**
 * The authentication headers of `method url`, lower-case names. Rejects only when a CDP JWT
 * cannot be signed (the key was checked at start, so: the package failed to load).
 */
export async function facilitatorHeaders(
  auth: FacilitatorAuth | undefined,
  method: 'GET' | 'POST',
  url: URL,
): Promise<Record<string, string>> {
  if (!auth) return {};
  const headers = { ...auth.headers };
  if (auth.cdp) {
    const { createAuthHeader, createCorrelationHeader } = await coinbaseX402();
    headers.authorization = await createAuthHeader(
      auth.cdp.apiKeyId,
      auth.cdp.apiKeySecret,
      method,
      url.host,
      url.pathname,
    );
    headers['correlation-context'] = createCorrelationHeader();
  }
  return headers;
}
