// How a facilitator's /settle answer is read, and the submission queue of our sending keys.
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_FACILITATOR_RESPONSE_BYTES, settleWithFacilitator } from '../../payments/incoming/facilitator';
import { IN_PROCESS_ONLY, SubmissionQueue, SubmissionQueueFull } from '../../payments/chains/submissions';
import type { PaymentPayload, PaymentRequirements } from '../../payments/x402/types';

type Reply = { status: number; body: string; delayMs?: number };
let reply: Reply;
let received: unknown[] = [];
let server: Server;
let url: string;

beforeAll(async () => {
  server = createServer((request, response) => {
    let text = '';
    request.on('data', (chunk: Buffer) => (text += chunk.toString()));
    request.on('end', () => {
      received.push({ method: request.method, path: request.url, body: JSON.parse(text) });
      setTimeout(() => {
        response.writeHead(reply.status, { 'content-type': 'application/json' });
        response.end(reply.body);
      }, reply.delayMs ?? 0);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}/`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

const payment: PaymentPayload = {
  x402Version: 1,
  scheme: 'exact',
  network: 'base-sepolia',
  payload: { transaction: 'AA==' },
};
const requirements = { network: 'base-sepolia', maxAmountRequired: '1' } as PaymentRequirements;

async function settle(next: Reply, timeoutMs = 2_000) {
  reply = next;
  received = [];
  return settleWithFacilitator(url, payment, requirements, { timeoutMs });
}

describe('settleWithFacilitator', () => {
  it('posts x402Version 1 with the payment and the requirements to /settle', async () => {
    const answer = await settle({
      status: 200,
      body: JSON.stringify({ success: true, transaction: '0xabc', network: 'base-sepolia', payer: '0x1' }),
    });
    expect(answer).toEqual({ kind: 'settled', transaction: '0xabc', payer: '0x1' });
    expect(received).toEqual([
      {
        method: 'POST',
        path: '/settle',
        body: { x402Version: 1, paymentPayload: payment, paymentRequirements: requirements },
      },
    ]);
  });

  it('sorts every answer into settled, unconfirmed, declined or unknown (declined is what it claims, not a refusal)', async () => {
    expect(
      await settle({
        status: 200,
        body: JSON.stringify({ success: false, errorReason: 'receipt_timeout', transaction: '0xdef' }),
      }),
    ).toEqual({
      kind: 'unconfirmed',
      transaction: '0xdef',
      errorReason: 'receipt_timeout',
    });
    expect(
      await settle({
        status: 200,
        body: JSON.stringify({ success: false, errorReason: 'insufficient_funds', transaction: '' }),
      }),
    ).toEqual({
      kind: 'declined',
      errorReason: 'insufficient_funds',
    });
    expect(
      await settle({ status: 400, body: JSON.stringify({ success: false, errorReason: 'invalid_payload' }) }),
    ).toEqual({ kind: 'declined', errorReason: 'invalid_payload', status: 400 });
    expect(await settle({ status: 400, body: 'nope' })).toEqual({
      kind: 'declined',
      errorReason: 'facilitator_http_400',
      status: 400,
    });
    // Our credentials refused (a facilitator that requires authentication): declined too, its status told.
    expect(await settle({ status: 401, body: '{"errorType":"unauthorized"}' })).toEqual({
      kind: 'declined',
      errorReason: 'facilitator_http_401',
      status: 401,
    });
    // Success without a transaction, a server error, an unreadable body: the payment may or may not have moved.
    expect(await settle({ status: 200, body: JSON.stringify({ success: true, transaction: '' }) })).toMatchObject({
      kind: 'unknown',
    });
    expect(await settle({ status: 502, body: JSON.stringify({ success: false, transaction: '' }) })).toMatchObject({
      kind: 'unknown',
    });
    expect(await settle({ status: 200, body: '<html>' })).toMatchObject({ kind: 'unknown' });
    expect(await settle({ status: 200, body: JSON.stringify({ success: 'yes', transaction: '0x1' }) })).toMatchObject({
      kind: 'unknown',
    });
  });

  it('gives up at the timeout and on an answer larger than a settlement response can be, as unknown', async () => {
    expect(
      await settle({ status: 200, body: JSON.stringify({ success: true, transaction: '0x1' }), delayMs: 500 }, 50),
    ).toMatchObject({ kind: 'unknown' });
    const huge = JSON.stringify({
      success: true,
      transaction: '0x1',
      padding: 'x'.repeat(MAX_FACILITATOR_RESPONSE_BYTES),
    });
    expect(await settle({ status: 200, body: huge })).toMatchObject({ kind: 'unknown' });
  });

  it('follows no redirect: a 3xx, whatever its body says, is unknown; nothing is posted twice', async () => {
    const moved = await settle({ status: 307, body: JSON.stringify({ success: true, transaction: '0x1' }) });
    expect(moved).toEqual({ kind: 'unknown', details: 'facilitator /settle answered 307' });
    expect(received).toHaveLength(1);
  });

  it('answers unknown when nothing listens', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as { port: number }).port;
    await new Promise((resolve) => closed.close(resolve));
    expect(
      await settleWithFacilitator(`http://127.0.0.1:${port}`, payment, requirements, { timeoutMs: 1_000 }),
    ).toMatchObject({ kind: 'unknown' });
  });
});

describe('SubmissionQueue', () => {
  it('runs the work of one key one at a time, in order, and other keys alongside', async () => {
    const queue = new SubmissionQueue(IN_PROCESS_ONLY);
    const events: string[] = [];
    const work = (name: string, ms: number) => async () => {
      events.push(`start ${name}`);
      await new Promise((resolve) => setTimeout(resolve, ms));
      events.push(`end ${name}`);
      return name;
    };
    const results = await Promise.all([
      queue.run('a', work('a1', 30)),
      queue.run('a', work('a2', 1)),
      queue.run('b', work('b1', 1)),
    ]);
    expect(results).toEqual(['a1', 'a2', 'b1']);
    expect(events.indexOf('end a1')).toBeLessThan(events.indexOf('start a2'));
    expect(events.indexOf('end b1')).toBeLessThan(events.indexOf('end a1'));
  });

  it('goes on after a failure, and refuses work beyond its bound', async () => {
    const queue = new SubmissionQueue(IN_PROCESS_ONLY, 2);
    const failing = queue.run('k', () => Promise.reject(new Error('boom')));
    const next = queue.run('k', () => Promise.resolve('next'));
    await expect(queue.run('k', () => Promise.resolve('third'))).rejects.toBeInstanceOf(SubmissionQueueFull);
    await expect(failing).rejects.toThrow('boom');
    expect(await next).toBe('next');
    expect(await queue.run('k', () => Promise.resolve('after'))).toBe('after');
  });
});
