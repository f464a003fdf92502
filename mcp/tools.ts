/**
 * The MCP server of the router: tools named as HTTPayer's MCP server names them where they do the
 * same thing (fetch, simulate, get_balance, check_limits, get_webhook_status, get_topup_link), and
 * search_endpoints, get_usage, list_payments and relay_fetch, each a call of our HTTP API with the
 * caller's API key. Each tool's input schema is a schema of the OpenAPI document
 * (openapi/dist/openapi.json), with its references resolved, never a second copy, plus the names
 * HTTPayer's tools give the same arguments (`url`, `webhook_id`), so that its agents' calls carry
 * over; the API validates the arguments against the document, and an error of ours comes back as a
 * tool error carrying our `code`. Served over stdio (mcp/stdio.ts) and over streamable HTTP at
 * POST /mcp (handlers/postMcp.ts).
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { CallToolRequestSchema, ListToolsRequestSchema, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { components } from '../codegen/api';

export const MCP_SERVER_NAME = 'payment-router';
export const MCP_SERVER_VERSION = '1.4.0';

type JsonSchema = Record<string, unknown>;

const DOCUMENT_PATH = fileURLToPath(new URL('../openapi/dist/openapi.json', import.meta.url));
let documentCache: JsonSchema | undefined;

function openApiDocument(): JsonSchema {
  documentCache ??= JSON.parse(readFileSync(DOCUMENT_PATH, 'utf8')) as JsonSchema;
  return documentCache;
}

function pointer(document: JsonSchema, ref: string): JsonSchema {
  let at: unknown = document;
  for (const part of ref.replace(/^#\//, '').split('/'))
    at = (at as Record<string, unknown>)[part.replaceAll('~1', '/').replaceAll('~0', '~')];
  if (typeof at !== 'object' || at === null) throw new Error(`the document has no ${ref}`);
  return at as JsonSchema;
}

/** A schema of the document with its $refs inlined (the document's schemas hold no cycle), examples dropped. */
function resolved(document: JsonSchema, schema: unknown, depth = 0): unknown {
  if (depth > 32) throw new Error('the document nests its schemas too deep');
  if (Array.isArray(schema)) return schema.map((item) => resolved(document, item, depth + 1));
  if (typeof schema !== 'object' || schema === null) return schema;
  const object = schema as JsonSchema;
  if (typeof object.$ref === 'string') return resolved(document, pointer(document, object.$ref), depth + 1);
  return Object.fromEntries(
    Object.entries(object)
      .filter(([key]) => key !== 'examples' && key !== 'example')
      .map(([key, value]) => [key, resolved(document, value, depth + 1)]),
  );
}

/** The request body schema of an operation of the document. */
function requestSchema(path: string, method: string): JsonSchema {
  const document = openApiDocument();
  const operation = pointer(document, `#/paths/${path.replaceAll('/', '~1')}/${method}`);
  const body = (operation.requestBody as JsonSchema | undefined)?.content as Record<string, JsonSchema> | undefined;
  const schema = body?.['application/json']?.schema;
  if (schema === undefined) throw new Error(`${method} ${path} has no JSON request body`);
  return resolved(document, schema) as JsonSchema;
}

/** An object schema whose properties are parameters of an operation of the document. */
function parameterSchema(path: string, method: string, names: Record<string, string>): JsonSchema {
  const document = openApiDocument();
  const item = pointer(document, `#/paths/${path.replaceAll('/', '~1')}`);
  const operation = item[method] as JsonSchema;
  const parameters = [
    ...((item.parameters as unknown[] | undefined) ?? []),
    ...((operation.parameters as unknown[] | undefined) ?? []),
  ].map((parameter) => resolved(document, parameter) as JsonSchema);
  const properties: Record<string, unknown> = {};
  const required: string[] = [];
  for (const [argument, name] of Object.entries(names)) {
    const parameter = parameters.find((candidate) => candidate.name === name);
    if (!parameter) throw new Error(`${method} ${path} has no parameter ${name}`);
    properties[argument] = { ...(parameter.schema as JsonSchema), description: parameter.description };
    if (parameter.required === true) required.push(argument);
  }
  return { type: 'object', additionalProperties: false, properties, required };
}

/** The answer of one call of our API. */
export interface ApiAnswer {
  status: number;
  headers: Headers;
  body: unknown;
  text: string;
}

/** How the tools reach the router: its URL, the caller's API key, and a wallet's paying fetch for relay_fetch. */
export interface RouterConnection {
  baseUrl: string;
  apiKey?: string | undefined;
  /** A fetch that pays x402 402s (@x402/fetch with the configured wallet); without one relay_fetch only asks. */
  payingFetch?: typeof fetch | undefined;
  fetch?: typeof fetch;
}

async function callApi(
  connection: RouterConnection,
  method: string,
  path: string,
  options: { body?: unknown; headers?: Record<string, string>; paying?: boolean } = {},
): Promise<ApiAnswer> {
  const send = (options.paying ? connection.payingFetch : undefined) ?? connection.fetch ?? fetch;
  const headers: Record<string, string> = { accept: 'application/json', ...options.headers };
  if (connection.apiKey) headers['x-api-key'] = connection.apiKey;
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const response = await send(new URL(path, connection.baseUrl), {
    method,
    headers,
    ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
  });
  const text = await response.text();
  let body: unknown = text;
  if ((response.headers.get('content-type') ?? '').includes('json') && text !== '') {
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
  }
  return { status: response.status, headers: response.headers, body, text };
}

/**
 * The headers of our answers that a caller acts on: the payments' receipts and transactions, the
 * 402's version 2 offers, the records to poll, and a replay's and a retry's markers.
 */
const RECEIPT_HEADERS = [
  'x-client-payment',
  'x-payment-response',
  'payment-response',
  'payment-required',
  'x-service-webhook',
  'x-service-status',
  'x-refund-webhook-id',
  'x-credits-charged',
  'idempotent-replayed',
  'retry-after',
];

/** A tool's result: the API's answer as JSON text; an error of ours (a `code`) is a tool error. */
function resultOf(answer: ApiAnswer): CallToolResult {
  const receipts = Object.fromEntries(
    RECEIPT_HEADERS.flatMap((name) => {
      const value = answer.headers.get(name);
      return value === null ? [] : [[name, value]];
    }),
  );
  const ours = typeof answer.body === 'object' && answer.body !== null && 'code' in answer.body;
  const payload = {
    status: answer.status,
    ...(Object.keys(receipts).length ? { headers: receipts } : {}),
    body: answer.body,
  };
  return { isError: answer.status >= 400 && ours, content: [{ type: 'text', text: JSON.stringify(payload) }] };
}

/** Arguments refused before any call, as the API refuses a bad request: a tool error with our 400 body. */
function refused(details: string): CallToolResult {
  const body: components['schemas']['ErrorBody'] = { code: 'validation_failed', error: 'Bad Request', details };
  return { isError: true, content: [{ type: 'text', text: JSON.stringify({ status: 400, body }) }] };
}

interface Tool {
  name: string;
  description: string;
  inputSchema: JsonSchema;
  run(connection: RouterConnection, args: Record<string, unknown>): Promise<CallToolResult>;
}

const EMPTY: JsonSchema = { type: 'object', additionalProperties: false, properties: {}, required: [] };

/** A query parameter's value as the URL carries it; anything but a string, number or boolean as JSON, for the API to refuse. */
function queryValue(value: unknown): string {
  return typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean'
    ? String(value)
    : JSON.stringify(value);
}

/** A tool that GETs `path` with its arguments as query parameters, named as `names` maps them (tool argument -> the document's parameter). */
function queryTool(name: string, description: string, path: string, names: Record<string, string>): Tool {
  return {
    name,
    description,
    inputSchema: Object.keys(names).length === 0 ? EMPTY : parameterSchema(path, 'get', names),
    run: async (connection, args) => {
      const query = new URLSearchParams();
      for (const [argument, value] of Object.entries(args))
        if (value !== undefined) query.set(names[argument] ?? argument, queryValue(value));
      const search = query.toString();
      return resultOf(await callApi(connection, 'GET', search === '' ? path : `${path}?${search}`));
    },
  };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The input schema of a tool that makes a call (fetch, simulate, relay_fetch): the document's
 * request body, with `url` beside `api_url` and `method` left out for GET, as HTTPayer's tools take them.
 */
function callSchema(body: JsonSchema): JsonSchema {
  const properties = body.properties as Record<string, JsonSchema>;
  return {
    ...body,
    description: `${String(body.description)} Give \`api_url\` (or \`url\`, as HTTPayer's tools name it); \`method\` is GET when left out. With \`url\`, an object \`body\` is sent as \`json\`, as HTTPayer's tools send it.`,
    required: [],
    properties: {
      url: { type: 'string', description: "HTTPayer's name of `api_url`: the target URL. Give one of the two." },
      ...properties,
      method: { ...properties.method, default: 'GET' },
    },
  };
}

/**
 * A call's arguments as the document's request body: HTTPayer's `url` becomes `api_url` (its
 * object `body` is JSON: `json`), and `method` is GET when left out. Both `url` and `api_url` are a
 * refusal (a string); anything else the document does not name is sent on, for the API to refuse by name.
 */
function callOf(args: Record<string, unknown>): Record<string, unknown> | string {
  if (!('url' in args)) return { ...args, method: args.method ?? 'GET' };
  const { url, body, method, ...rest } = args;
  if ('api_url' in rest) return "Give api_url or url (its name in HTTPayer's tools), not both.";
  return {
    ...rest,
    api_url: url,
    method: typeof method === 'string' ? method.toUpperCase() : (method ?? 'GET'),
    ...(body === undefined ? {} : isObject(body) ? { json: body } : { body }),
  };
}

/** A tool that POSTs a call (ours or HTTPayer's arguments) to `path`. */
function callTool(name: string, description: string, path: string): Tool {
  return {
    name,
    description,
    inputSchema: callSchema(requestSchema(path, 'post')),
    run: async (connection, args) => {
      const body = callOf(args);
      if (typeof body === 'string') return refused(body);
      return resultOf(await callApi(connection, 'POST', path, { body }));
    },
  };
}

/** The x402 version a payment header's value says it is in (base64 JSON `{x402Version, ...}`), if it can be read. */
function paymentVersion(value: string): unknown {
  try {
    const decoded: unknown = JSON.parse(Buffer.from(value, 'base64').toString('utf8'));
    return isObject(decoded) ? decoded.x402Version : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The payment headers of a relay_fetch: `payment_signature` as PAYMENT-SIGNATURE, `x_payment` as
 * X-PAYMENT, or as PAYMENT-SIGNATURE when it holds a version 2 payment (an agent that paid the 402's
 * PAYMENT-REQUIRED offer and passed it as x_payment). Both given is a refusal (a string).
 */
function paymentHeaders(xPayment: unknown, paymentSignature: unknown): Record<string, string> | string | undefined {
  if (xPayment !== undefined && paymentSignature !== undefined)
    return 'Give x_payment or payment_signature, not both: one payment pays one call.';
  if (typeof paymentSignature === 'string') return { 'PAYMENT-SIGNATURE': paymentSignature };
  if (typeof xPayment !== 'string') return undefined;
  return paymentVersion(xPayment) === 2 ? { 'PAYMENT-SIGNATURE': xPayment } : { 'X-PAYMENT': xPayment };
}

function relayTool(): Tool {
  const payments = parameterSchema('/relay', 'post', { x_payment: 'X-PAYMENT', payment_signature: 'PAYMENT-SIGNATURE' })
    .properties as Record<string, JsonSchema>;
  const call = callSchema(requestSchema('/relay', 'post'));
  return {
    name: 'relay_fetch',
    description:
      "Call a paid resource through POST /relay, paying the router in USDC from the configured wallet (x402 version 1 or 2); without a wallet, read the 402's offers (its body in version 1, its PAYMENT-REQUIRED header in version 2) and send the signed payment as x_payment (either version) or payment_signature (version 2). max_amount refuses a dearer target. A paid answer's headers carry the client's own transaction (x-client-payment) and the receipts.",
    inputSchema: {
      ...call,
      properties: {
        ...(call.properties as JsonSchema),
        x_payment: {
          ...payments.x_payment,
          description:
            "The payment for the 402's offer: an X-PAYMENT (x402 version 1), or a PAYMENT-SIGNATURE (version 2, sent as that header).",
        },
        payment_signature: payments.payment_signature,
      },
    },
    run: async (connection, args) => {
      const { x_payment: xPayment, payment_signature: paymentSignature, ...rest } = args;
      const headers = paymentHeaders(xPayment, paymentSignature);
      if (typeof headers === 'string') return refused(headers);
      const body = callOf(rest);
      if (typeof body === 'string') return refused(body);
      return resultOf(
        await callApi(connection, 'POST', '/relay', {
          body,
          ...(headers ? { headers } : {}),
          // The configured wallet pays only a call that carries no payment of the agent's.
          paying: headers === undefined,
        }),
      );
    },
  };
}

function webhookTool(): Tool {
  const schema = parameterSchema('/webhooks/{id}', 'get', { id: 'id' });
  const { id } = schema.properties as Record<string, JsonSchema>;
  return {
    name: 'get_webhook_status',
    description:
      "The state of an asynchronous payment, refund or purchase (GET /webhooks/{id}), by its id (`id`, or `webhook_id` as HTTPayer's tool names it): the `webhook_id` of a 502 or 202, or an X-Service-Webhook.",
    inputSchema: {
      ...schema,
      required: [],
      properties: { id, webhook_id: { ...id, description: "HTTPayer's name of `id`. Give one of the two." } },
    },
    run: async (connection, args) => {
      if (args.id !== undefined && args.webhook_id !== undefined)
        return refused("Give id or webhook_id (its name in HTTPayer's tools), not both.");
      const value = args.id ?? args.webhook_id;
      if (typeof value !== 'string' || value === '')
        return refused('id (or webhook_id) is required: the webhook id to look up.');
      return resultOf(await callApi(connection, 'GET', `/webhooks/${encodeURIComponent(value)}`));
    },
  };
}

/** Credits x this is their price in atomic USDC (POST /v1/credits/purchase). */
const MICRO_USDC_PER_CREDIT = 1000;

function topupTool(): Tool {
  const schema = requestSchema('/v1/credits/purchase', 'post');
  return {
    name: 'get_topup_link',
    description:
      "How to buy credits (1 credit = 0.001 USDC): without input, where and how (as HTTPayer's get_topup_link, a link to give the user); with `credits`, the x402 offer of POST /v1/credits/purchase for that many (pay it with an x402 client and the same body and API key; credits x 1000 atomic USDC).",
    inputSchema: { ...schema, required: [] },
    run: async (connection, args) => {
      const url = new URL('/v1/credits/purchase', connection.baseUrl).toString();
      const how = `POST ${url} with the API key in x-api-key and the body {"credits": N}, paying its 402 with an x402 client in version 1 (X-PAYMENT) or 2 (PAYMENT-SIGNATURE); N credits cost N x ${MICRO_USDC_PER_CREDIT} atomic USDC (N x 0.001 USDC).`;
      if (Object.keys(args).length === 0) {
        const link = { topup_url: url, method: 'POST', micro_usdc_per_credit: MICRO_USDC_PER_CREDIT, how };
        return { content: [{ type: 'text', text: JSON.stringify(link) }] };
      }
      const answer = await callApi(connection, 'POST', '/v1/credits/purchase', { body: args });
      if (answer.status !== 402) return resultOf(answer);
      // The offer is what was asked for: not a tool error, though it comes as a 402.
      const result = resultOf({ ...answer, status: 200 });
      result.content.push({ type: 'text', text: `Pay it: ${how}` });
      return result;
    },
  };
}

function tools(): Tool[] {
  return [
    callTool(
      'fetch',
      "Call a paid HTTP resource (x402) through the router's POST /proxy: the router pays the target from its wallet and charges the API key's organisation in credits (1 credit = 0.001 USDC). max_amount (atomic USDC) refuses a dearer target.",
      '/proxy',
    ),
    callTool(
      'simulate',
      'Dry run of fetch (POST /proxy/sim): what the target asks and what the call would cost in credits; nothing is paid.',
      '/proxy/sim',
    ),
    queryTool(
      'get_balance',
      "The API key's credits, its daily cap and spend, and its policy (GET /v1/credits/balance). Takes no arguments.",
      '/v1/credits/balance',
      {},
    ),
    queryTool(
      'check_limits',
      "The service's daily volume limits and today's use (GET /limits); the key's own cap is in get_balance. Takes no arguments.",
      '/limits',
      {},
    ),
    webhookTool(),
    topupTool(),
    queryTool(
      'search_endpoints',
      'Paid endpoints the router has called over the last day (GET /discovery/resources, the x402 Bazaar list): filter by text and by a maximum price in atomic USDC.',
      '/discovery/resources',
      { query: 'q', max_price: 'max_amount', limit: 'limit' },
    ),
    queryTool(
      'get_usage',
      "What the API key's organisation spent through fetch (/proxy) over a range of UTC days (at most 90; by default the last 30), by day, by key and by target host, in credits and atomic USDC, with the credits released or still pending (GET /v1/usage).",
      '/v1/usage',
      { from: 'from', to: 'to' },
    ),
    queryTool(
      'list_payments',
      "The API key's organisation's payments through fetch (/proxy) and its credit grants and purchases, newest first (GET /v1/payments): target, network, amount, credits, fee, status, transaction and key of each; filter by key, target host, status, kind and time; pass next_cursor as cursor for the next page.",
      '/v1/payments',
      {
        key: 'key',
        host: 'host',
        status: 'status',
        kind: 'kind',
        from: 'from',
        to: 'to',
        limit: 'limit',
        cursor: 'cursor',
      },
    ),
    relayTool(),
  ];
}

/** The tools, built once: their schemas are read from the document, which does not change while we run. */
let toolsCache: Tool[] | undefined;

/** Arguments a tool's schema does not name: refused before anything is called, by name. */
function unknownArguments(tool: Tool, args: Record<string, unknown>): string[] {
  if (tool.inputSchema.additionalProperties !== false) return [];
  const known = Object.keys(tool.inputSchema.properties as JsonSchema);
  return Object.keys(args).filter((name) => !known.includes(name));
}

/**
 * An MCP server whose tools call the router through `connection`. The tools are served through
 * the protocol's own handlers (McpServer's `server`), not McpServer.registerTool: their input
 * schemas are the document's JSON Schemas as they are, which registerTool would want as zod.
 */
export function createRouterMcpServer(connection: RouterConnection): McpServer {
  const mcp = new McpServer(
    { name: MCP_SERVER_NAME, version: MCP_SERVER_VERSION },
    { capabilities: { tools: {} }, instructions: 'Pay x402 resources through the payment router.' },
  );
  const { server } = mcp;
  const list = (toolsCache ??= tools());
  server.setRequestHandler(ListToolsRequestSchema, () => ({
    tools: list.map(({ name, description, inputSchema }) => ({
      name,
      description,
      inputSchema: inputSchema as { type: 'object' },
    })),
  }));
  server.setRequestHandler(CallToolRequestSchema, async (request) => {
    const tool = list.find((candidate) => candidate.name === request.params.name);
    if (!tool) return { isError: true, content: [{ type: 'text', text: `no tool named ${request.params.name}` }] };
    const args = request.params.arguments ?? {};
    const unknown = unknownArguments(tool, args);
    if (unknown.length > 0)
      return refused(
        `${tool.name} has no argument ${unknown.map((name) => `"${name}"`).join(', ')}; it takes ${
          Object.keys(tool.inputSchema.properties as JsonSchema).join(', ') || 'none'
        }.`,
      );
    try {
      return await tool.run(connection, args);
    } catch (error) {
      return {
        isError: true,
        content: [{ type: 'text', text: `the router could not be called: ${(error as Error).message}` }],
      };
    }
  });
  return mcp;
}

export const TOOL_NAMES = [
  'fetch',
  'simulate',
  'get_balance',
  'check_limits',
  'get_webhook_status',
  'get_topup_link',
  'search_endpoints',
  'get_usage',
  'list_payments',
  'relay_fetch',
] as const;
