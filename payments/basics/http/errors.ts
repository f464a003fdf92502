/**
 * Every failure of the outbound client has a snake_case code that callers map to a response (400
 * for the request and URL codes, 502 for the target codes) and a human-readable `details` that is
 * safe to show to our client. Inside this folder a failure is thrown as an OutboundError; every
 * exported function hands it back as the failure of a Result.
 */
import { fail, type Failure } from '../result';

export type OutboundErrorCode =
  // The call request cannot be turned into a target request (answer 400).
  | 'invalid_method'
  | 'conflicting_body_fields'
  | 'invalid_field'
  | 'invalid_header'
  | 'invalid_cookie'
  // The target URL is refused by the SSRF guard (answer 400).
  | 'invalid_url'
  | 'unsupported_scheme'
  | 'ssrf_blocked'
  // The target could not be called or its answer cannot be used (answer 502).
  | 'too_many_redirects'
  | 'timeout'
  | 'unreachable'
  | 'malformed_response'
  | 'response_too_large'
  // Configuration (SSRF_ALLOW_HOSTS) is wrong: the service should refuse to start.
  | 'invalid_allow_host';

export class OutboundError extends Error {
  readonly code: OutboundErrorCode;
  readonly details: string;

  constructor(code: OutboundErrorCode, details: string, options?: { cause?: unknown }) {
    super(`${code}: ${details}`, options);
    this.name = 'OutboundError';
    this.code = code;
    this.details = details;
  }
}

/** The failure an exported function returns for an OutboundError thrown inside the client. */
export function outboundFailure(error: OutboundError): Failure<OutboundErrorCode> {
  return fail(error.code, error.details);
}
