/**
 * The MCP server of the router: tools named as HTTPayer's MCP server names them where they do the
 * same thing (fetch, simulate, get_balance, check_limits, get_webhook_status, get_topup_link,
 * search_endpoints, get_usage, list_payments) and relay_fetch, each a call of our HTTP API with the caller's API key. Each
 * tool's input schema is a schema of the OpenAPI document (openapi/dist/openapi.json), with its
 * references resolved, never a second copy; the API validates the arguments against the same
 * schema, and an error of ours comes back as a tool error carrying our `code`. Served over stdio
 * (mcp/stdio.ts) and over streamable HTTP at POST /mcp (handlers/postMcp.ts).
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { CallToolRequestSchema, ListToolsRequestSchema, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';

export const MCP_SERVER_NAME = 'payment-router';
export const MCP_SERVER_VERSION = '1.3.0';

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

const RECEIPT_HEADERS = ['x-payment-response', 'payment-response', 'x-service-webhook', 'x-service-status'];

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

interface Tool {
  name: string;
  description: string;
  inputSchema: JsonSchema;
  run(connection: RouterConnection, args: Record<string, unknown>): Promise<CallToolResult>;
}

const EMPTY: JsonSchema = { type: 'object', additionalProperties: false, properties: {} };

/** A query parameter's value as the URL carries it; anything but a string, number or boolean as JSON, for the API to refuse. */
function queryValue(value: unknown): string {
  return typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean'
    ? String(value)
    : JSON.stringify(value);
}

/**
 * A tool that GETs `path` with its arguments as query parameters, named as `names` maps them (tool
 * argument -> the document's parameter). An argument the schema does not name is sent as it is,
 * so that the API refuses it by name (a 400, a tool error) rather than it being dropped unseen.
 */
function queryTool(name: string, description: string, path: string, names: Record<string, string>): Tool {
  return {
    name,
    description,
    inputSchema: parameterSchema(path, 'get', names),
    run: async (connection, args) => {
      const query = new URLSearchParams();
      for (const [argument, value] of Object.entries(args))
        if (value !== undefined) query.set(names[argument] ?? argument, queryValue(value));
      const search = query.toString();
      return resultOf(await callApi(connection, 'GET', search === '' ? path : `${path}?${search}`));
    },
  };
}

function tools(): Tool[] {
  const relayBody = requestSchema('/relay', 'post');
  const relaySchema = {
    ...relayBody,
    properties: {
      ...(relayBody.properties as JsonSchema),
      ...(parameterSchema('/relay', 'post', { x_payment: 'X-PAYMENT' }).properties as JsonSchema),
    },
  };
  return [
    {
      name: 'fetch',
      description:
        "Call a paid HTTP resource (x402) through the router's POST /proxy: the router pays the target from its wallet and charges the API key's organisation in credits (1 credit = 0.001 USDC). max_amount (atomic USDC) refuses a dearer target.",
      inputSchema: requestSchema('/proxy', 'post'),
      run: async (connection, args) => resultOf(await callApi(connection, 'POST', '/proxy', { body: args })),
    },
    {
      name: 'simulate',
      description:
        'Dry run of fetch (POST /proxy/sim): what the target asks and what the call would cost in credits; nothing is paid.',
      inputSchema: requestSchema('/proxy/sim', 'post'),
      run: async (connection, args) => resultOf(await callApi(connection, 'POST', '/proxy/sim', { body: args })),
    },
    {
      name: 'get_balance',
      description: "The API key's credits, its daily cap and spend, and its policy (GET /v1/credits/balance).",
      inputSchema: EMPTY,
      run: async (connection) => resultOf(await callApi(connection, 'GET', '/v1/credits/balance')),
    },
    {
      name: 'check_limits',
      description:
        "The service's daily volume limits and today's use (GET /limits); the key's own cap is in get_balance.",
      inputSchema: EMPTY,
      run: async (connection) => resultOf(await callApi(connection, 'GET', '/limits')),
    },
    {
      name: 'get_webhook_status',
      description: 'The state of an asynchronous payment, refund or purchase (GET /webhooks/{id}).',
      inputSchema: parameterSchema('/webhooks/{id}', 'get', { id: 'id' }),
      run: async (connection, args) =>
        resultOf(await callApi(connection, 'GET', `/webhooks/${encodeURIComponent(String(args.id))}`)),
    },
    {
      name: 'get_topup_link',
      description:
        'How to buy credits: the x402 offer of POST /v1/credits/purchase for this many credits (pay it with an x402 client and the same body and API key; credits x 1000 atomic USDC).',
      inputSchema: requestSchema('/v1/credits/purchase', 'post'),
      run: async (connection, args) => {
        const answer = await callApi(connection, 'POST', '/v1/credits/purchase', { body: args });
        const offer = answer.status === 402 ? { ...answer, status: 200 } : answer;
        const result = resultOf(offer);
        const url = new URL('/v1/credits/purchase', connection.baseUrl).toString();
        result.content.push({
          type: 'text',
          text: `Pay it: POST ${url} with x-api-key and ${JSON.stringify(args)}, paying the 402 in x402 version 1 (X-PAYMENT) or 2 (PAYMENT-SIGNATURE).`,
        });
        return result;
      },
    },
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
    {
      name: 'relay_fetch',
      description:
        "Call a paid resource through POST /relay, paying the router in USDC from the configured wallet (x402 version 1 or 2); without a wallet, send x_payment (an X-PAYMENT for the router's 402) or read the 402's offers. max_amount refuses a dearer target.",
      inputSchema: relaySchema,
      run: async (connection, args) => {
        const { x_payment: payment, ...call } = args;
        const headers = typeof payment === 'string' ? { 'X-PAYMENT': payment } : undefined;
        return resultOf(
          await callApi(connection, 'POST', '/relay', {
            body: call,
            ...(headers ? { headers } : {}),
            paying: headers === undefined,
          }),
        );
      },
    },
  ];
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
  const list = tools();
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
    try {
      return await tool.run(connection, request.params.arguments ?? {});
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
