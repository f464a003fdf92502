/**
 * The HTTP client of every test: each response is checked against the OpenAPI document before the
 * test sees it. A status the operation does not declare, a content type it does not list, a JSON
 * body or a header that does not match its schema, or a missing X-Request-Id fails the test.
 */
import type { OpenAPIBackend } from 'openapi-backend';
import { createBackend, loadDocument } from '../../server/openapi';

export interface ContractResponse<T = any> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
  operationId: string | undefined;
}

export interface RequestOptions {
  body?: unknown;
  rawBody?: string | Buffer;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

export class ContractViolation extends Error {}

let backendPromise: Promise<OpenAPIBackend> | undefined;

export function contractBackend(): Promise<OpenAPIBackend> {
  backendPromise ??= createBackend(loadDocument());
  return backendPromise;
}

function declaredResponse(responses: Record<string, any>, status: number): any {
  return responses[String(status)] ?? responses[`${Math.floor(status / 100)}XX`] ?? responses.default;
}

function mediaType(contentType: string | null): string {
  return (contentType ?? '').split(';')[0]!.trim().toLowerCase();
}

function isGenericError(body: unknown): boolean {
  if (typeof body !== 'object' || body === null) return false;
  const { error, details } = body as Record<string, unknown>;
  return typeof error === 'string' && (details === undefined || typeof details === 'string');
}

const ROUTABLE_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

/** The response checked against what `operation` declares for its status. */
function checkDeclared(api: OpenAPIBackend, operation: any, response: ContractResponse, problems: string[]): void {
  const operationId = operation.operationId!;
  const declared = declaredResponse(operation.responses ?? {}, response.status);
  if (!declared) {
    problems.push(`${operationId} does not declare status ${response.status}`);
    return;
  }
  const content: Record<string, any> = declared.content ?? {};
  const type = mediaType(response.headers.get('content-type'));
  const listed = Object.keys(content);
  if (response.text.length > 0 && listed.length === 0)
    problems.push(`${operationId} ${response.status} declares no body but one was sent`);
  if (listed.length > 0 && !listed.includes(type) && !listed.includes('*/*')) {
    problems.push(
      `${operationId} ${response.status} does not list content type "${type}" (lists ${listed.join(', ')})`,
    );
  }
  if (type === 'application/json' && content['application/json']) {
    const result = api.validateResponse(response.body, operationId, response.status);
    if (result.errors) problems.push(`${operationId} ${response.status} body: ${JSON.stringify(result.errors)}`);
  }
  const headers: Record<string, string> = {};
  response.headers.forEach((value, name) => {
    headers[name] = value;
  });
  const headerResult = api.validateResponseHeaders(headers, operationId, { statusCode: response.status });
  if (headerResult.errors)
    problems.push(`${operationId} ${response.status} headers: ${JSON.stringify(headerResult.errors)}`);
}

export async function checkResponse(method: string, path: string, response: ContractResponse): Promise<void> {
  const api = await contractBackend();
  const problems: string[] = [];
  if (!response.headers.get('x-request-id')) problems.push('no X-Request-Id header');
  const url = new URL(path, 'http://service.invalid');
  const match = (routeMethod: string) =>
    api.router.matchOperation({ method: routeMethod, path: url.pathname, headers: {}, query: {} });
  const operation = match(method);
  if (operation) {
    response.operationId = operation.operationId!;
    checkDeclared(api, operation, response, problems);
  } else {
    const onThisPath = ROUTABLE_METHODS.map((routeMethod) => match(routeMethod)).filter((found) => found !== undefined);
    if (onThisPath.length > 0 && response.status === 405) {
      // The path exists under other methods: the 405 is the one its operations document, with
      // exactly those methods in Allow.
      const allowed = ROUTABLE_METHODS.filter((routeMethod) => match(routeMethod) !== undefined).map((routeMethod) =>
        routeMethod.toUpperCase(),
      );
      if (response.headers.get('allow') !== allowed.join(', '))
        problems.push(`Allow is ${response.headers.get('allow')}, expected ${allowed.join(', ')}`);
      for (const sibling of onThisPath) checkDeclared(api, sibling, response, problems);
    } else {
      // Refusals before routing (an unknown path, a body too large, a cap) carry the error body.
      if (![404, 405, 413, 429].includes(response.status))
        problems.push(`status ${response.status} for a path of no operation`);
      if (onThisPath.length > 0 && response.status === 404)
        problems.push('404 for a path the document has (under another method)');
      if (!isGenericError(response.body)) problems.push('error body is not {error, details}');
    }
  }
  if (problems.length > 0) {
    throw new ContractViolation(
      `${method} ${path} -> ${response.status} breaks the document:\n- ${problems.join('\n- ')}\nbody: ${response.text.slice(0, 500)}`,
    );
  }
}

export function contractClient(baseUrl: string) {
  async function request<T = any>(
    method: string,
    path: string,
    options: RequestOptions = {},
  ): Promise<ContractResponse<T>> {
    const headers: Record<string, string> = { ...(options.headers ?? {}) };
    let body: string | Buffer | undefined;
    if (options.rawBody !== undefined) {
      body = options.rawBody;
    } else if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers['content-type'] ??= 'application/json';
    }
    const res = await fetch(new URL(path, baseUrl), {
      method,
      headers,
      body,
      signal: options.signal,
      redirect: 'manual',
    });
    const text = await res.text();
    let parsed: unknown = text;
    if (mediaType(res.headers.get('content-type')) === 'application/json' && text.length > 0) parsed = JSON.parse(text);
    const response: ContractResponse<T> = {
      status: res.status,
      headers: res.headers,
      body: parsed as T,
      text,
      operationId: undefined,
    };
    await checkResponse(method, path, response);
    return response;
  }
  return {
    request,
    get: <T = any>(path: string, options?: RequestOptions) => request<T>('GET', path, options),
    post: <T = any>(path: string, body?: unknown, options?: RequestOptions) =>
      request<T>('POST', path, { ...options, body }),
  };
}

export type ContractClient = ReturnType<typeof contractClient>;
