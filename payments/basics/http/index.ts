/**
 * SSRF-safe outbound HTTP client for calls to the targets our clients name.
 *
 *   buildTargetRequest(call)        call request (spec 2.1) -> TargetRequest, or a typed refusal
 *   sendTargetRequest(request, o)   guard, connect to the vetted address, bounded read
 *   checkUrl / classifyAddress      the guard's decision, without connecting
 *
 * Each returns its failures as values (Result with an OutboundErrorCode reason); OutboundError is
 * thrown only inside this folder.
 *
 * Decisions:
 * - The guard runs on every hop, before any byte leaves: scheme, then every address the host
 *   resolves to. The connection is made with a lookup that only yields those addresses, so a
 *   second DNS answer (rebinding) is never used; TLS still verifies the host name.
 * - Redirects: up to maxRedirects (default 5), each re-checked; 303, and 301/302 after POST,
 *   become GET without body; Authorization, Cookie, X-PAYMENT and PAYMENT-SIGNATURE are dropped
 *   on a change of origin.
 * - Keep-alive (connections.ts): a connection is reused only for a request whose own check
 *   vetted the same scheme, host, port and set of addresses it was opened to; idle connections
 *   close after 2 s. A reused connection found closed before any answer is retried once on a
 *   new connection for idempotent methods only.
 * - Content encoding: targets are asked for identity and nothing is decompressed (headers.ts).
 * - Allow list (SSRF_ALLOW_HOSTS) exempts exact host:port pairs from the address check only;
 *   scheme rules and address pinning still apply. The caller passes it in.
 */
export type { OutboundErrorCode } from './errors';
export {
  classifyAddress,
  parseIpv4,
  parseIpv6,
  type AddressClass,
  type AddressReason,
  type Ipv4Embedding,
} from './address';
export {
  checkUrl,
  parseAllowHosts,
  systemResolver,
  NO_ALLOW_HOSTS,
  type AllowHosts,
  type ResolvedAddress,
  type Resolver,
  type UrlCheck,
  type VettedTarget,
} from './guard';
export {
  isSafeResponseHeader,
  safeResponseHeaders,
  PAYMENT_REQUEST_HEADERS,
  TARGET_X402_RESPONSE_HEADERS,
  type ResponseHeaders,
} from './headers';
export {
  buildTargetRequest,
  TARGET_METHODS,
  type BuildOptions,
  type CallRequest,
  type TargetMethod,
  type TargetRequest,
} from './request';
export { TargetConnections, DEFAULT_CONNECTION_POOL, type ConnectionPoolOptions } from './connections';
export {
  sendTargetRequest,
  nodeTransport,
  DEFAULT_MAX_REDIRECTS,
  DEFAULT_MAX_RESPONSE_BYTES,
  type SendOptions,
  type TargetAnswer,
  type TargetResponse,
  type Transport,
} from './send';
