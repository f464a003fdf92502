// Worker of http.mjs: performs one fetch at a time and hands the answer back through shared memory.
import { parentPort } from 'node:worker_threads';

parentPort.on('message', async ({ request, flag, data }) => {
  let answer;
  try {
    const response = await fetch(request.url, {
      method: request.method,
      headers: request.headers,
      body: request.body ?? undefined,
      redirect: 'manual',
      signal: AbortSignal.timeout(request.timeoutMs),
    });
    const headers = {};
    response.headers.forEach((value, name) => {
      headers[name] = value;
    });
    answer = { status: response.status, headers, body: await response.text() };
  } catch (error) {
    answer = { status: 0, headers: {}, body: '', error: String(error) };
  }
  const bytes = new TextEncoder().encode(JSON.stringify(answer));
  const view = new Uint8Array(data);
  if (bytes.length > view.length - 4) bytes.fill(32, 0);
  new DataView(data).setUint32(0, Math.min(bytes.length, view.length - 4));
  view.set(bytes.subarray(0, view.length - 4), 4);
  Atomics.store(flag, 0, 1);
  Atomics.notify(flag, 0);
});
