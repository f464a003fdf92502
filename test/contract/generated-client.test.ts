// A client generated from the document the service serves, as users generate one: openapi-typescript
// types from GET /openapi.json, openapi-fetch, and a program (generated-client/program.ts) that calls
// every operation, type-checked with tsc --strict and run against the service. Optional response
// headers must be optional in the generated types, a failed webhook record must be told apart
// from an error body by a field, our own 422 on /proxy and /relay must be read (`code`, `price`)
// without a cast, and a misspelt x-api-key must not compile. Every answer the program received is
// checked against the document.
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalLlm, type LocalLlm } from '../../devnet/llm';
import { loadDocument } from '../../server/openapi';
import { createTestAccount } from '../support/accounts';
import { checkResponse } from '../support/contract';
import { llmEnv } from '../support/proxy';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';
import type { Seen as ProgramSeen } from './generated-client/program';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const bin = (name: string) => path.join(ROOT, 'node_modules', '.bin', name);
const PROGRAM = fileURLToPath(new URL('./generated-client/program.ts', import.meta.url));
const WALLET = '0x1111111111111111111111111111111111111111';
/** The USDC of base-sepolia, which the service pays in there. */
const USDC_BASE_SEPOLIA = '0x036CbD53842c5426634e7929541eC2318f3dCF7e';
/** What /priced asks, above the program's max_amount of 10000. */
const PRICE = '50000';

let t: TestService;
let llm: LocalLlm;
let target: http.Server;
let dir: string;

beforeAll(async () => {
  // A target that never asks for payment (/relay and /proxy pass its answer through), except on
  // /priced, whose x402 402 asks more than the program's ceiling.
  target = http.createServer((req, res) => {
    res.setHeader('content-type', 'application/json');
    if (req.url?.startsWith('/priced')) {
      const { port: own } = target.address() as AddressInfo;
      res.statusCode = 402;
      res.end(
        JSON.stringify({
          x402Version: 1,
          error: 'X-PAYMENT header is required',
          accepts: [
            {
              scheme: 'exact',
              network: 'base-sepolia',
              maxAmountRequired: PRICE,
              resource: `http://127.0.0.1:${own}/priced`,
              description: 'A priced resource',
              mimeType: 'application/json',
              payTo: '0x2222222222222222222222222222222222222222',
              maxTimeoutSeconds: 60,
              asset: USDC_BASE_SEPOLIA,
              extra: { name: 'USDC', version: '2' },
            },
          ],
        }),
      );
      return;
    }
    res.end(JSON.stringify({ free: true }));
  });
  await new Promise<void>((resolve) => target.listen(0, '127.0.0.1', resolve));
  llm = await startLocalLlm();
  const { port } = target.address() as AddressInfo;
  t = await startTestService({
    NETWORKS: 'base-sepolia',
    // Never contacted: the calls here end before any chain is read.
    RPC_URL_BASE_SEPOLIA: 'http://127.0.0.1:9/',
    EVM_PRIVATE_KEY: `0x${'11'.repeat(32)}`,
    SSRF_ALLOW_HOSTS: `127.0.0.1:${port}`,
    ...llmEnv(llm),
  });
  await mkdir(path.join(ROOT, '.tmp'), { recursive: true });
  dir = await mkdtemp(path.join(ROOT, '.tmp', 'generated-client-'));
}, 60_000);

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(llm)?.close();
  await new Promise((resolve) => ifStarted(target)?.close(resolve) ?? resolve(undefined));
  const made = ifStarted(dir);
  if (made !== undefined) await rm(made, { recursive: true, force: true });
});

const STRICT = [
  '--strict',
  '--noEmit',
  '--target',
  'ES2022',
  '--module',
  'ESNext',
  '--moduleResolution',
  'Bundler',
  '--types',
  'node',
  '--lib',
  'ES2023,DOM',
];

/** What the program printed of one answer; the test reads its fields freely. */
type Seen = Omit<ProgramSeen, 'read'> & { read: any };

async function webhookRecord(values: Record<string, unknown>): Promise<string> {
  const row = await t.database.handle.db
    .insertInto('webhooks')
    .values({ kind: 'relay_refund', ...values } as never)
    .returning('id')
    .executeTakeFirstOrThrow();
  return row.id;
}

describe('a client generated from the served document (openapi-typescript + openapi-fetch, tsc --strict)', () => {
  it('type-checks, calls every operation, reads optional headers as possibly absent, tells a failed record from an error body, reads our 422 of /proxy and /relay without a cast and refuses a misspelt x-api-key', async () => {
    // The document as a user gets it, and the types generated from it.
    const served = await t.client.get('/openapi.json');
    expect(served.status).toBe(200);
    await writeFile(path.join(dir, 'openapi.json'), served.text);
    await run(bin('openapi-typescript'), [path.join(dir, 'openapi.json'), '-o', path.join(dir, 'api.ts')], {
      cwd: dir,
    });
    const program = (await readFile(PROGRAM, 'utf8')).replace("from '../../../codegen/api'", "from './api'");
    expect(program).toContain("from './api'");
    await writeFile(path.join(dir, 'program.ts'), program);
    await writeFile(path.join(dir, 'package.json'), JSON.stringify({ type: 'module', private: true }));

    // Strict TypeScript, as the reporters compiled their clients: a header the document makes
    // required while the server does not always send it, or a union the fields cannot narrow, fails here.
    const tsc = await run(bin('tsc'), [...STRICT, 'program.ts'], { cwd: dir }).catch((error: unknown) => {
      const { stdout = '', stderr = '' } = error as { stdout?: string; stderr?: string };
      throw new Error(`tsc --strict refused the generated client:\n${stdout}${stderr}`);
    });
    expect(tsc.stdout).toBe('');

    // The program's misspelt key compiles only as an error: without its @ts-expect-error, tsc names
    // the missing x-api-key parameter on that line.
    const directive = program.split('\n').findIndex((line) => line.includes('@ts-expect-error'));
    expect(program.split('\n')[directive + 1]).toContain("'x-api-kee'");
    await writeFile(
      path.join(dir, 'misspelt.ts'),
      program
        .split('\n')
        .filter((_line, index) => index !== directive)
        .join('\n'),
    );
    const misspelt = await run(bin('tsc'), [...STRICT, 'misspelt.ts'], { cwd: dir }).then(
      () => '',
      (error: unknown) => String((error as { stdout?: string }).stdout),
    );
    const errors = misspelt.split('\n').filter((line) => line.startsWith('misspelt.ts('));
    expect(errors).toHaveLength(1);
    expect(errors[0]).toContain(`misspelt.ts(${directive + 1},`);
    expect(misspelt).toContain('"x-api-key": string');

    const { key } = await createTestAccount(t.database.handle.db, { credits: 1_000n });
    const setting = {
      baseUrl: t.service.url,
      apiKey: key,
      freeTarget: `http://127.0.0.1:${(target.address() as AddressInfo).port}/free`,
      pricedTarget: `http://127.0.0.1:${(target.address() as AddressInfo).port}/priced`,
      failedWebhookId: await webhookRecord({
        status: 'refund_failed',
        relay_tx_id: 7n,
        error: 'the refund transaction reverted',
      }),
      pendingWebhookId: await webhookRecord({ status: 'async_processing', message: 'watching' }),
      wallet: WALLET,
    };
    const { stdout } = await run(bin('tsx'), ['program.ts', JSON.stringify(setting)], {
      cwd: dir,
      maxBuffer: 64 * 1024 * 1024,
    });
    const seen = JSON.parse(stdout) as Seen[];

    // Every answer the program got is one the document declares.
    for (const answer of seen) {
      const headers = new Headers(answer.headers);
      const type = (headers.get('content-type') ?? '').split(';')[0]!.trim();
      await checkResponse(answer.method, answer.path, {
        status: answer.status,
        headers,
        body: type === 'application/json' && answer.text !== '' ? JSON.parse(answer.text) : answer.text,
        text: answer.text,
        operationId: undefined,
      });
    }

    // Every operation of the document was called.
    const document = loadDocument() as unknown as { paths: Record<string, Record<string, { operationId?: string }>> };
    const operationIds = Object.values(document.paths).flatMap((item) =>
      Object.values(item).flatMap((operation) => (operation.operationId ? [operation.operationId] : [])),
    );
    expect([...new Set(seen.map((answer) => answer.operationId))].sort()).toEqual([...new Set(operationIds)].sort());

    const read = (operationId: string) => seen.filter((answer) => answer.operationId === operationId);
    expect(read('getConfig')[0]!.read).toEqual({ enabled: ['base-sepolia'], percentage: 3 });
    expect(read('getRelayLimits')[0]!.read).toEqual({ wallet: WALLET });
    expect(read('getConsole')[0]!.read).toEqual({ html: true });
    expect(read('getPayments')[0]!.read).toEqual({ items: 0, next: null });
    expect(read('getUsage')[0]!.read).toEqual({ days: 31, credits: 0 });
    expect(read('postRelaySim')[0]!.read).toEqual({ requiresPayment: false });
    const [relayed, relayRefused] = read('postRelay');
    expect(relayed!.read).toEqual({
      status: 200,
      body: JSON.stringify({ free: true }),
      headers: {},
    });

    // An optional header, read through the generated type: absent on the first call, 'true' on its replay.
    const [first, replay, proxyRefused] = read('postProxy');
    expect(first!.read).toEqual({ status: 200, body: JSON.stringify({ free: true }), headers: {} });
    expect(replay!.read).toEqual({
      status: 200,
      body: JSON.stringify({ free: true }),
      headers: { 'Idempotent-Replayed': 'true' },
    });

    // Our 422 on both routes that pass a target's 422 through, read through the generated types.
    const refusal = { code: 'price_above_limit', price: PRICE, maxAmount: '10000', network: 'base-sepolia' };
    expect(proxyRefused!.read).toEqual({ status: 422, body: refusal });
    expect(relayRefused!.read).toEqual({ status: 422, body: refusal });

    // A failed record and an error body on the same operation, each recognised by its field.
    const [failed, pending, malformed] = read('getWebhook');
    expect(failed!.read).toEqual({
      status: 500,
      body: { kind: 'record', status: 'failed', errorType: 'refund_failed', error: 'the refund transaction reverted' },
    });
    expect(pending!.read).toEqual({ status: 202, retryAfter: 2 });
    expect(malformed!.read).toEqual({
      status: 400,
      body: {
        kind: 'error',
        code: 'validation_failed',
        error: 'Bad Request',
        details: 'path.id must match format "uuid"',
      },
    });

    const [offer, invalid] = read('postLlmChat');
    expect(offer!.read).toEqual({
      status: 402,
      code: 'payment_required',
      error: 'Payment Required',
      networks: ['base-sepolia'],
      paymentRequired: true,
    });
    expect(invalid!.read).toEqual({
      status: 400,
      code: 'validation_failed',
      error: 'Bad Request',
      details: 'requestBody is missing the required property "messages"',
    });
    expect(read('postLlmTranslate')[0]!.read).toEqual({ status: 402, code: 'payment_required' });
  }, 400_000);
});

describe('the response headers of the document', () => {
  it('a header declared by reference is one the server always sends (generators make a referenced header required)', () => {
    const document = loadDocument() as unknown as {
      paths: Record<string, Record<string, { responses?: Record<string, any> }>>;
      components: { headers: Record<string, { required?: boolean }>; responses: Record<string, any> };
    };
    const problems: string[] = [];
    for (const [route, item] of Object.entries(document.paths)) {
      for (const [method, operation] of Object.entries(item)) {
        for (const [status, declared] of Object.entries(operation.responses ?? {})) {
          const response = declared.$ref
            ? document.components.responses[String(declared.$ref).split('/').pop()!]
            : declared;
          for (const [name, header] of Object.entries<any>(response.headers ?? {})) {
            if (header.$ref === undefined) continue;
            const component = document.components.headers[String(header.$ref).split('/').pop()!]!;
            if (component.required !== true) problems.push(`${method.toUpperCase()} ${route} ${status} ${name}`);
          }
        }
      }
    }
    expect(problems).toEqual([]);
  });
});
