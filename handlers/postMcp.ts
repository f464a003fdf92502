/**
 * POST /mcp: the router's MCP server (mcp/tools.ts) over streamable HTTP, stateless and in JSON:
 * each request gets a server and a transport of its own (the SDK's web-standard transport), whose
 * tools call this instance's API with the request's own API key.
 */
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { createRouterMcpServer } from '../mcp/tools';
import type { Handler } from './types';

export const postMcp: Handler<'postMcp'> = async (ctx, deps) => {
  const apiKey = ctx.headers['x-api-key'];
  const server = createRouterMcpServer({
    baseUrl: deps.baseUrl(),
    apiKey: Array.isArray(apiKey) ? apiKey[0] : apiKey,
  });
  const transport = new WebStandardStreamableHTTPServerTransport({
    sessionIdGenerator: undefined,
    enableJsonResponse: true,
  });
  await server.connect(transport);
  try {
    const headers = new Headers();
    for (const name of ['accept', 'content-type', 'mcp-protocol-version']) {
      const value = ctx.headers[name];
      if (typeof value === 'string') headers.set(name, value);
    }
    const request = new Request(`${deps.baseUrl()}/mcp`, {
      method: 'POST',
      headers,
      body: JSON.stringify(ctx.body),
      signal: ctx.signal,
    });
    const response = await transport.handleRequest(request, { parsedBody: ctx.body });
    const raw = Buffer.from(await response.arrayBuffer());
    const passed: Record<string, string> = {};
    response.headers.forEach((value, name) => {
      if (name !== 'content-type' && name !== 'content-length') passed[name] = value;
    });
    // A notification or a response is answered 202 without content: no body, no content type.
    return {
      status: response.status,
      raw,
      contentType: response.headers.get('content-type') ?? (raw.length === 0 ? '' : 'application/json'),
      headers: passed,
    };
  } finally {
    await server.close();
  }
};
