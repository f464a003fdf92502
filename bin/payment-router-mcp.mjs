#!/usr/bin/env node
// `npx payment-router-mcp`: the router's MCP server over stdio (mcp/stdio.ts). A built install
// (`npm run build`) runs dist/mcp.js; a checkout runs the TypeScript source through tsx.
import { existsSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';

const built = fileURLToPath(new URL('../dist/mcp.js', import.meta.url));
if (existsSync(built)) {
  await import(pathToFileURL(built).href);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  await import(new URL('../mcp/stdio.ts', import.meta.url).href);
}
