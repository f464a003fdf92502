import { ok, type Result } from '../result';
import { OutboundError, outboundFailure, type OutboundErrorCode } from './errors';
import { connectionTokens, isOwnedRequestHeader } from './headers';

export const TARGET_METHODS = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH'] as const;
export type TargetMethod = (typeof TARGET_METHODS)[number];

/** The call request of spec section 2.1, as received (already schema-validated, checked again here). */
export interface CallRequest {
  api_url: string;
  /** A method name; unknown like the fields below until checked (build). */
  method: unknown;
  json?: unknown;
  data?: unknown;
  body?: unknown;
  /** Deprecated alias of json. */
  payload?: unknown;
  params?: unknown;
  headers?: unknown;
  auth?: unknown;
  cookies?: unknown;
  /** Seconds; the caller turns it into SendOptions.timeoutMs. */
  timeout?: number;
  network?: string;
}

export interface TargetRequest {
  url: string;
  method: TargetMethod;
  /** Lower-case names; host and content-length are set when sending. */
  headers: Record<string, string>;
  body?: Buffer;
}

export interface BuildOptions {
  /** Our own payment for the target; a caller's X-PAYMENT or PAYMENT-SIGNATURE is never forwarded. */
  paymentHeader?: string;
  /** The x402 version the target asked in: 1 sends X-PAYMENT (the default), 2 PAYMENT-SIGNATURE. */
  paymentVersion?: 1 | 2;
}

/*
 * The rules below are also the patterns of the OpenAPI document (CallHeaders, CallCookies,
 * BasicAuth, CallBodyFieldConflict), so a request the document accepts is one this module accepts;
 * a contract test holds each pattern's source equal to the expression here.
 */
export const BODY_FIELDS = ['json', 'data', 'body', 'payload'] as const;
/** RFC 9110 token: header names, cookie names. */
export const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
// Field content of RFC 9110 minus obs-text beyond Latin-1: no CR, LF, NUL or other controls.
export const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
// A header value without the semicolon, which would start the next cookie.
export const COOKIE_VALUE = /^[\t\x20-\x3a\x3c-\x7e\x80-\xff]*$/;
// The colon separates the user name from the password in Basic credentials.
export const BASIC_AUTH_USERNAME = /^[^:]*$/;

export type BodyField = (typeof BODY_FIELDS)[number];

/** The body fields a call request gives (null counts as not given), in their documented order. */
export function givenBodyFields(call: Partial<Record<BodyField, unknown>>): BodyField[] {
  return BODY_FIELDS.filter((field) => call[field] !== undefined && call[field] !== null);
}

export function buildTargetRequest(
  call: CallRequest,
  options: BuildOptions = {},
): Result<TargetRequest, OutboundErrorCode> {
  try {
    return ok(build(call, options));
  } catch (error) {
    if (error instanceof OutboundError) return outboundFailure(error);
    throw error;
  }
}

function build(call: CallRequest, options: BuildOptions): TargetRequest {
  const method = String(call.method).toUpperCase();
  if (!(TARGET_METHODS as readonly string[]).includes(method)) {
    throw new OutboundError('invalid_method', `method must be one of ${TARGET_METHODS.join(', ')}`);
  }
  const url = targetUrl(call.api_url, call.params);
  const headers = forwardedHeaders(call.headers);
  const body = encodeBody(call, headers);
  if (call.auth !== undefined && call.auth !== null) headers.authorization = basicAuthorization(call.auth);
  if (call.cookies !== undefined && call.cookies !== null) headers.cookie = mergedCookies(headers.cookie, call.cookies);
  headers['accept-encoding'] = 'identity';
  if (options.paymentHeader !== undefined) {
    const name = options.paymentVersion === 2 ? 'PAYMENT-SIGNATURE' : 'X-PAYMENT';
    headers[name.toLowerCase()] = headerValue(name, options.paymentHeader);
  }
  return { url, method: method as TargetMethod, headers, ...(body ? { body } : {}) };
}

function targetUrl(apiUrl: unknown, params: unknown): string {
  let url: URL;
  try {
    url = new URL(String(apiUrl));
  } catch {
    throw new OutboundError('invalid_url', `api_url ${JSON.stringify(apiUrl)} is not an absolute URL`);
  }
  url.hash = '';
  if (params === undefined || params === null) return url.href;
  // Appended as text so the existing query keeps its exact bytes.
  const extra = formEncode('params', params);
  if (extra !== '') url.search = url.search === '' ? extra : `${url.search.slice(1)}&${extra}`;
  return url.href;
}

function encodeBody(call: CallRequest, headers: Record<string, string>): Buffer | undefined {
  const given = givenBodyFields(call);
  if (given.length > 1) {
    throw new OutboundError(
      'conflicting_body_fields',
      `give at most one of json, data, body, payload; got ${given.join(' and ')}`,
    );
  }
  const field = given[0];
  if (field === undefined) return undefined;
  const value = call[field];
  switch (field) {
    case 'json':
    case 'payload':
      headers['content-type'] = 'application/json';
      return Buffer.from(jsonText(field, value));
    case 'data':
      if (typeof value === 'string') return Buffer.from(value);
      headers['content-type'] = 'application/x-www-form-urlencoded';
      return Buffer.from(formEncode('data', value));
    case 'body':
      return Buffer.from(typeof value === 'string' ? value : jsonText(field, value));
  }
}

function jsonText(field: string, value: unknown): string {
  try {
    return JSON.stringify(value);
  } catch (cause) {
    throw new OutboundError('invalid_field', `${field} cannot be serialised as JSON`, { cause });
  }
}

type Scalar = string | number | boolean;

function isScalar(value: unknown): value is Scalar {
  return typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean';
}

/** application/x-www-form-urlencoded; a list repeats its key, null leaves the key out. */
function formEncode(field: string, record: unknown): string {
  const form = new URLSearchParams();
  for (const [key, value] of Object.entries(asRecord(field, record))) {
    if (value === null || value === undefined) continue;
    const values: unknown[] = Array.isArray(value) ? value : [value];
    if (!values.every(isScalar)) {
      throw new OutboundError('invalid_field', `${field}.${key} must be a string, number, boolean or a list of them`);
    }
    for (const item of values) form.append(key, String(item));
  }
  return form.toString();
}

function asRecord(field: string, value: unknown): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new OutboundError('invalid_field', `${field} must be an object`);
  }
  return value as Record<string, unknown>;
}

function forwardedHeaders(given: unknown): Record<string, string> {
  if (given === undefined || given === null) return {};
  const checked: Record<string, string> = {};
  for (const [name, value] of Object.entries(asRecord('headers', given))) {
    if (!TOKEN.test(name)) {
      throw new OutboundError('invalid_header', `header name ${JSON.stringify(name)} is not a valid HTTP field name`);
    }
    const lower = name.toLowerCase();
    if (lower in checked) throw new OutboundError('invalid_header', `header ${name} is given more than once`);
    if (!isScalar(value)) throw new OutboundError('invalid_header', `header ${name} must be a string`);
    checked[lower] = headerValue(name, String(value));
  }
  const listed = connectionTokens(checked.connection);
  const forwarded: Record<string, string> = {};
  for (const [name, value] of Object.entries(checked)) {
    if (!isOwnedRequestHeader(name) && !listed.has(name)) forwarded[name] = value;
  }
  return forwarded;
}

function headerValue(name: string, value: string): string {
  if (!HEADER_VALUE.test(value)) {
    throw new OutboundError('invalid_header', `header ${name} contains CR, LF or another control character`);
  }
  return value;
}

function basicAuthorization(auth: unknown): string {
  const { username, password } = asRecord('auth', auth);
  if (typeof username !== 'string' || typeof password !== 'string') {
    throw new OutboundError('invalid_field', 'auth needs a string username and password');
  }
  if (!BASIC_AUTH_USERNAME.test(username))
    throw new OutboundError('invalid_field', 'auth username must not contain a colon');
  return `Basic ${Buffer.from(`${username}:${password}`, 'utf8').toString('base64')}`;
}

/** The name of a `name=value` pair of a Cookie header: all of it when there is no `=`. */
function cookieName(pair: string): string {
  const [name = ''] = pair.split('=');
  return name.trim();
}

/** Cookies from the cookies field replace same-named ones from a Cookie header. */
function mergedCookies(cookieHeader: string | undefined, cookies: unknown): string {
  const added = new Map<string, string>();
  for (const [name, value] of Object.entries(asRecord('cookies', cookies))) {
    if (!TOKEN.test(name))
      throw new OutboundError('invalid_cookie', `cookie name ${JSON.stringify(name)} is not valid`);
    if (!isScalar(value) || !COOKIE_VALUE.test(String(value))) {
      throw new OutboundError(
        'invalid_cookie',
        `cookie ${name} must be a string without semicolons or control characters`,
      );
    }
    added.set(name, String(value));
  }
  const kept = (cookieHeader ?? '')
    .split(';')
    .map((pair) => pair.trim())
    .filter((pair) => pair !== '' && !added.has(cookieName(pair)));
  return [...kept, ...[...added].map(([name, value]) => `${name}=${value}`)].join('; ');
}
