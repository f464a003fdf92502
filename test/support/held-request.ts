/**
 * A request held open by its own client: headers sent, body not finished. The service admits it
 * (and counts it against its cap) as soon as the headers arrive; it stays in flight until released.
 */
import http from 'node:http';
import { checkResponse, type ContractResponse } from './contract';

export interface HeldRequest {
  /** Sends the rest of the body; resolves with the (contract-checked) response. */
  release(): Promise<ContractResponse>;
  /** Drops the connection without finishing the request. */
  abort(): void;
  /** True once the service answered (a refused request is answered before its body ends). */
  answered(): boolean;
}

export function holdRequest(baseUrl: string, method: string, path: string, body: unknown = {}): HeldRequest {
  const payload = Buffer.from(JSON.stringify(body));
  const split = Math.max(1, Math.floor(payload.length / 2));
  const url = new URL(path, baseUrl);
  const request = http.request({
    host: url.hostname,
    port: url.port,
    method,
    path: url.pathname,
    agent: false,
    headers: { 'content-type': 'application/json', 'content-length': String(payload.length) },
  });
  let answered = false;
  const response = new Promise<ContractResponse>((resolve, reject) => {
    request.once('response', (res) => {
      answered = true;
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.once('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        const headers = new Headers();
        for (const [name, value] of Object.entries(res.headers))
          if (typeof value === 'string') headers.set(name, value);
        const isJson = (res.headers['content-type'] ?? '').startsWith('application/json');
        const contract: ContractResponse = {
          status: res.statusCode ?? 0,
          headers,
          text,
          body: isJson && text ? JSON.parse(text) : text,
          operationId: undefined,
        };
        checkResponse(method, path, contract).then(() => resolve(contract), reject);
      });
    });
    request.on('error', reject);
  });
  response.catch(() => {});
  request.flushHeaders();
  request.write(payload.subarray(0, split));
  return {
    release() {
      request.end(payload.subarray(split));
      return response;
    },
    abort() {
      request.destroy();
    },
    answered: () => answered,
  };
}
