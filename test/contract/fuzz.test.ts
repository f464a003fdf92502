// Requests generated from the OpenAPI document, for every operation: valid ones must get a status
// the operation declares with a body that matches it, invalid ones a declared 4xx with
// {code, error, details}; nothing may fail with a 5xx the request could not legitimately cause, and
// every answer carries X-Request-Id (the contract client checks that and every schema). The
// generator is seeded: FUZZ_SEED=<n> replays a run, and a failure names its seed and request;
// FUZZ_RUNS=<n> searches longer, FUZZ_STATS=1 (or =details) prints the statuses each operation got.
// Targets are the harness's loopback targets or names under .invalid, which the test resolver
// never resolves: nothing leaves the machine.
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers, type RouteName } from '../../devnet/index';
import { startLocalLlm, type LocalLlm } from '../../devnet/llm';
import { ERROR_CODES } from '../../handlers/errors';
import { loadDocument } from '../../server/openapi';
import { createTestAccount, revokedKey } from '../support/accounts';
import type { ContractResponse } from '../support/contract';
import {
  examplePath,
  HTTP_METHODS,
  operationsOf,
  requestArbitraries,
  type FuzzRequest,
  type Operation,
} from '../support/fuzz-requests';
import { peersEnv } from '../support/proxy';
import { tableResolver } from '../support/resolver';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const SEED = Number(process.env.FUZZ_SEED ?? 402_2024);
/** Requests per operation and class; FUZZ_RUNS raises it for a longer search. */
const VALID_RUNS = Number(process.env.FUZZ_RUNS ?? 60);
const INVALID_RUNS = Number(process.env.FUZZ_RUNS ?? 60);

/** Free and paid routes that answer at once; /error answers a 5xx of its own once paid. */
const ROUTES: RouteName[] = ['free', 'paid', 'echo', 'paidEcho', 'error'];

const document = loadDocument();
const operations = operationsOf(document);

let peers: Peers;
let llm: LocalLlm;
let t: TestService;
let apiKey: string;
let refusedKeys: string[];

beforeAll(async () => {
  peers = await startPeers({ networks: ['base-sepolia', 'solana-devnet'] });
  llm = await startLocalLlm();
  t = await startTestService(
    { ...peersEnv(peers), LLM_BASE_URL: llm.url, LLM_API_KEY: llm.apiKey, LLM_MODEL: llm.model },
    // Resolves no name at all: .invalid targets fail as unknown hosts, and no DNS server is asked.
    { resolver: tableResolver() },
  );
  const { db } = t.database.handle;
  const account = await createTestAccount(db, { credits: 10_000_000n, dailyCapCredits: 10_000_000n });
  apiKey = account.key;
  const tampered = apiKey.slice(0, -1) + (apiKey.endsWith('a') ? 'b' : 'a');
  refusedKeys = [await revokedKey(db), `prs_AAAAAAAAAA_${'B'.repeat(32)}`, 'sk-live-123', tampered];
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(llm)?.close();
  await ifStarted(peers)?.stop();
});

function apiUrls(): fc.Arbitrary<string> {
  const targets = Object.values(peers.targets);
  return fc.oneof(
    {
      weight: 3,
      arbitrary: fc
        .tuple(fc.constantFrom(...targets), fc.constantFrom(...ROUTES))
        .map(([target, route]) => target.routes[route].url),
    },
    {
      weight: 2,
      arbitrary: fc
        .tuple(
          fc.constantFrom('http', 'https'),
          fc.constantFrom('target.invalid', 'api.target.invalid'),
          fc.webSegment(),
        )
        .map(([scheme, host, segment]) => `${scheme}://${host}/${segment}`),
    },
    // Refused by the SSRF guard from the URL alone, before any name is looked up.
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        'ftp://target.invalid/file',
        'http://user:secret@target.invalid/x',
        'file:///etc/hosts',
      ),
    },
  );
}

function seedOf(operation: Operation, salt: number): number {
  let hash = SEED ^ salt;
  for (const char of `${operation.method} ${operation.template}`)
    hash = Math.imul(hash ^ char.charCodeAt(0), 0x01000193);
  return hash | 0;
}

/** Statuses seen per operation and class, printed with FUZZ_STATS=1 to see where the generator reaches. */
const seen = new Map<string, Map<string, number>>();
afterAll(() => {
  if (process.env.FUZZ_STATS) for (const [name, counts] of seen) console.log(name, Object.fromEntries(counts));
});

async function send(request: FuzzRequest): Promise<ContractResponse> {
  const response = await sendUnrecorded(request).catch((error: unknown) => {
    // A contract violation or a failed exchange: name the request that caused it.
    throw new Error(
      `${error instanceof Error ? error.message : String(error)}\nseed ${SEED} (FUZZ_SEED)\nrequest: ${describeRequest(request)}`,
    );
  });
  const name = `${request.valid ? 'valid' : 'invalid'} ${request.operationId}`;
  const counts = seen.get(name) ?? new Map<string, number>();
  const key =
    process.env.FUZZ_STATS === 'details'
      ? `${response.status} ${String(response.body?.details ?? '')
          .replace(/"[^"]*"/g, '"…"')
          .slice(0, 100)}`
      : String(response.status);
  counts.set(key, (counts.get(key) ?? 0) + 1);
  seen.set(name, counts);
  return response;
}

async function sendUnrecorded(request: FuzzRequest): Promise<ContractResponse> {
  const headers = { ...request.headers };
  if (request.rawBody !== undefined) headers['content-type'] = 'application/json';
  return t.client.request(request.method, request.path, {
    headers,
    body: request.body,
    rawBody: request.rawBody,
    signal: AbortSignal.timeout(30_000),
  });
}

function describeRequest(request: FuzzRequest): string {
  return JSON.stringify(request, null, 1).slice(0, 2000);
}

/** Below this bound (X-TIMEOUT or the body's timeout) a local target may not answer in time, its payment included. */
const SHORT_CALL_MS = 10_000;

/**
 * The 5xx a valid request may legitimately cause: 502 when its target cannot be reached (a name
 * under .invalid), answered a 5xx itself (/error), or was given less time than a paid call takes
 * (a short X-TIMEOUT or timeout). Nothing else: a 500 would be our own failure, and the LLM
 * backend and every peer are up, so a 503 would be one too.
 */
function serverErrorAllowed(request: FuzzRequest, status: number): boolean {
  if (status !== 502) return false;
  const call = (request.body ?? {}) as { api_url?: unknown; timeout?: unknown };
  if (typeof call.api_url !== 'string') return false;
  const url = new URL(call.api_url);
  const headerMs = Number(request.headers['X-TIMEOUT'] ?? Infinity);
  const bodyMs = typeof call.timeout === 'number' ? call.timeout * 1000 : Infinity;
  return url.hostname.endsWith('.invalid') || url.pathname === '/error' || Math.min(headerMs, bodyMs) < SHORT_CALL_MS;
}

/** A code of the table, sent with the code's own status. */
function hasOwnCode(response: ContractResponse): boolean {
  const { code } = (response.body ?? {}) as { code?: unknown };
  return (
    typeof code === 'string' &&
    Object.hasOwn(ERROR_CODES, code) &&
    ERROR_CODES[code as keyof typeof ERROR_CODES].status === response.status
  );
}

function failure(request: FuzzRequest, response: ContractResponse, problem: string): Error {
  return new Error(
    `${problem}\nseed ${SEED} (FUZZ_SEED)\nrequest: ${describeRequest(request)}\nanswer ${response.status}: ${response.text.slice(0, 500)}`,
  );
}

describe.each(operations.map((operation) => [`${operation.method} ${operation.template}`, operation] as const))(
  '%s',
  (_name, operation) => {
    it('answers valid requests as the document says', async () => {
      const { valid, accepts } = requestArbitraries(document, operation, { apiUrls: apiUrls(), apiKey, refusedKeys });
      const hasInputs = operation.parameters.length > 0 || operation.body !== undefined;
      await fc.assert(
        fc.asyncProperty(valid, async (request) => {
          if (request.body !== undefined && operation.body)
            expect(accepts(operation.body.schema, request.body), 'the generator made a body the document refuses').toBe(
              true,
            );
          const response = await send(request);
          if (response.status >= 500 && !serverErrorAllowed(request, response.status))
            throw failure(request, response, `a valid request got ${response.status}`);
          // A 5xx is always ours (a target's is never passed through) and carries its code, unless it
          // reports a state (a failed webhook record, an unavailable health check) rather than an error.
          const reportsState = typeof response.body === 'object' && response.body !== null && 'status' in response.body;
          if (response.status >= 500 && !reportsState && !hasOwnCode(response))
            throw failure(request, response, `the ${response.status} carries no code of the table`);
        }),
        { seed: seedOf(operation, 1), numRuns: hasInputs ? VALID_RUNS : 3, endOnFailure: true },
      );
    });

    // Whether an operation can be sent an invalid request depends on the document alone (GET /config has no input).
    const refusable =
      requestArbitraries(document, operation, {
        apiUrls: fc.constant('http://target.invalid/'),
        apiKey: 'k',
        refusedKeys: ['k'],
      }).invalid !== null;
    if (refusable) {
      it('refuses invalid requests with a declared 4xx and {error, details}', async () => {
        const { invalid } = requestArbitraries(document, operation, { apiUrls: apiUrls(), apiKey, refusedKeys });
        await fc.assert(
          fc.asyncProperty(invalid!, async (request) => {
            const response = await send(request);
            const { status, body } = response;
            if (request.expectStatus !== undefined && status !== request.expectStatus)
              throw failure(request, response, `expected ${request.expectStatus}`);
            if (status < 400 || status > 499)
              throw failure(request, response, `an invalid request (${request.why}) got ${status}`);
            // The range 4XX of /relay and /proxy is the target's own answer passed through; our refusals are declared one by one.
            if (!(String(status) in operation.responses))
              throw failure(request, response, `${status} is not declared by ${operation.operationId}`);
            const { error, details } = (body ?? {}) as { error?: unknown; details?: unknown };
            if (typeof error !== 'string' || typeof details !== 'string')
              throw failure(request, response, 'the refusal is not {error, details}');
            if (!hasOwnCode(response))
              throw failure(request, response, 'the refusal carries no code of the table with its status');
          }),
          { seed: seedOf(operation, 2), numRuns: INVALID_RUNS, endOnFailure: true },
        );
      });
    }
  },
);

describe('methods a path does not support', () => {
  const paths = Object.entries<Record<string, unknown>>(document.paths as Record<string, Record<string, unknown>>);
  it.each(paths.map(([template, item]) => [template, item] as const))(
    '%s answers them 405 with {error, details} and Allow',
    async (template, item) => {
      const supported = HTTP_METHODS.filter((method) => item[method.toLowerCase()] !== undefined);
      const unsupported = HTTP_METHODS.filter((method) => !supported.includes(method));
      expect(unsupported.length).toBeGreaterThan(0);
      for (const method of unsupported) {
        const response = await t.client.request(
          method,
          examplePath(document, template),
          method === 'GET' ? {} : { body: {} },
        );
        expect(response.status, `${method} ${template}`).toBe(405);
        expect(response.body).toEqual({
          code: 'method_not_allowed',
          error: 'Method Not Allowed',
          details: expect.any(String),
        });
        const allow = (response.headers.get('allow') ?? '').split(',').map((name) => name.trim().toUpperCase());
        expect(allow, `Allow of ${template}`).toEqual(expect.arrayContaining(supported));
        expect(allow, `Allow of ${template}`).not.toContain(method);
      }
    },
  );
});
