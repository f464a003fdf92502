import { describe, expect, it } from 'vitest';
import { buildTargetRequest, type CallRequest, type TargetRequest } from '../../payments/basics/http';

function built(call: CallRequest, paymentHeader?: string): TargetRequest {
  const result = buildTargetRequest(call, { paymentHeader });
  if (!result.ok) throw new Error(`${result.reason}: ${result.details}`);
  return result.value;
}

function refusal(call: CallRequest) {
  const result = buildTargetRequest(call);
  if (result.ok) throw new Error(`expected a refusal, built ${JSON.stringify(result.value)}`);
  return result;
}

const target = 'https://api.example/v1/items';

describe('buildTargetRequest bodies', () => {
  it('sends json as application/json', () => {
    const request = built({ api_url: target, method: 'POST', json: { amount: '0.10', note: 'café' } });
    expect(request.headers['content-type']).toBe('application/json');
    expect(request.body?.toString('utf8')).toBe('{"amount":"0.10","note":"café"}');
  });

  it('treats payload as a deprecated alias of json', () => {
    const request = built({ api_url: target, method: 'PUT', payload: [1, 2] });
    expect(request.headers['content-type']).toBe('application/json');
    expect(request.body?.toString()).toBe('[1,2]');
  });

  it('form-encodes a data object', () => {
    const request = built({
      api_url: target,
      method: 'POST',
      data: { a: 1, b: 'x y&z', list: ['p', 'q'], skipped: null },
    });
    expect(request.headers['content-type']).toBe('application/x-www-form-urlencoded');
    expect(request.body?.toString()).toBe('a=1&b=x+y%26z&list=p&list=q');
  });

  it('sends a data string raw, with only the caller content type', () => {
    const bare = built({ api_url: target, method: 'POST', data: '<x>1</x>' });
    expect(bare.body?.toString()).toBe('<x>1</x>');
    expect(bare.headers['content-type']).toBeUndefined();
    const typed = built({
      api_url: target,
      method: 'POST',
      data: '<x>1</x>',
      headers: { 'Content-Type': 'application/xml' },
    });
    expect(typed.headers['content-type']).toBe('application/xml');
  });

  it('sends a body string unchanged and a body object as JSON text, without a content type', () => {
    const text = built({ api_url: target, method: 'POST', body: 'a=1&a=2' });
    expect(text.body?.toString()).toBe('a=1&a=2');
    expect(text.headers['content-type']).toBeUndefined();
    const object = built({ api_url: target, method: 'POST', body: { k: 'v' } });
    expect(object.body?.toString()).toBe('{"k":"v"}');
    expect(object.headers['content-type']).toBeUndefined();
  });

  it('sets our content type over the caller one for json and form data', () => {
    const request = built({ api_url: target, method: 'POST', json: {}, headers: { 'content-type': 'text/plain' } });
    expect(request.headers['content-type']).toBe('application/json');
  });

  it('has no body when no body field is given', () => {
    expect(built({ api_url: target, method: 'GET' }).body).toBeUndefined();
    expect(built({ api_url: target, method: 'POST', json: null }).body).toBeUndefined();
  });

  it.each([
    [{ json: {}, data: 'x' }, 'json and data'],
    [{ body: 'x', payload: {} }, 'body and payload'],
    [{ json: {}, data: {}, body: 'x', payload: {} }, 'json and data and body and payload'],
    [{ json: {}, payload: {} }, 'json and payload'],
  ])('refuses two body fields and names them: %j', (fields, named) => {
    const error = refusal({ api_url: target, method: 'POST', ...fields });
    expect(error.reason).toBe('conflicting_body_fields');
    expect(error.details).toContain(named);
  });
});

describe('buildTargetRequest URL, headers and credentials', () => {
  it('appends params to the query and keeps the existing query bytes', () => {
    const request = built({
      api_url: 'http://api.example/p?x=1&y=%20z#frag',
      method: 'GET',
      params: { a: 'b c', list: [1, true], n: null },
    });
    expect(request.url).toBe('http://api.example/p?x=1&y=%20z&a=b+c&list=1&list=true');
    expect(built({ api_url: 'http://api.example/p', method: 'GET', params: { a: '1' } }).url).toBe(
      'http://api.example/p?a=1',
    );
    expect(built({ api_url: 'http://api.example/p?x', method: 'GET', params: {} }).url).toBe('http://api.example/p?x');
  });

  it('forwards caller headers except the ones we own or that belong to the connection', () => {
    const request = built(
      {
        api_url: target,
        method: 'GET',
        headers: {
          'X-Trace': 'abc',
          Accept: 'application/json',
          Host: 'evil.example',
          'Content-Length': '999',
          Connection: 'keep-alive, X-Hop',
          'X-Hop': 'dropped because Connection names it',
          'Keep-Alive': 'timeout=5',
          'Proxy-Authorization': 'Basic eA==',
          'Proxy-Whatever': '1',
          TE: 'trailers',
          Trailer: 'x',
          'Transfer-Encoding': 'chunked',
          Upgrade: 'websocket',
          'X-PAYMENT': 'client-supplied',
          Expect: '100-continue',
          'Accept-Encoding': 'gzip',
        },
      },
      'our-payment',
    );
    expect(request.headers).toEqual({
      'x-trace': 'abc',
      accept: 'application/json',
      'accept-encoding': 'identity',
      'x-payment': 'our-payment',
    });
  });

  it('never forwards the caller X-PAYMENT, also when we have none', () => {
    expect(
      built({ api_url: target, method: 'GET', headers: { 'x-payment': 'theirs' } }).headers['x-payment'],
    ).toBeUndefined();
  });

  it('turns auth into a Basic Authorization header', () => {
    const request = built({
      api_url: target,
      method: 'GET',
      auth: { username: 'ana', password: 'p:ss wörd' },
      headers: { Authorization: 'Bearer x' },
    });
    expect(request.headers.authorization).toBe(`Basic ${Buffer.from('ana:p:ss wörd').toString('base64')}`);
  });

  it('merges cookies into the Cookie header, the cookies field winning on a shared name', () => {
    const request = built({
      api_url: target,
      method: 'GET',
      headers: { Cookie: 'a=1; b=2' },
      cookies: { b: 3, c: 'x y' },
    });
    expect(request.headers.cookie).toBe('a=1; b=3; c=x y');
    expect(built({ api_url: target, method: 'GET', cookies: { s: 'v' } }).headers.cookie).toBe('s=v');
  });

  it.each([
    [{ headers: { 'X-A': 'ok\r\nInjected: 1' } }, 'invalid_header'],
    [{ headers: { 'X-A': 'line\nfeed' } }, 'invalid_header'],
    [{ headers: { 'X-A\r\nInjected': '1' } }, 'invalid_header'],
    [{ headers: { 'X A': '1' } }, 'invalid_header'],
    [{ headers: { 'X-A': 'nul\u0000' } }, 'invalid_header'],
    [{ headers: { 'X-A': { nested: true } } }, 'invalid_header'],
    [{ headers: { 'X-A': '1', 'x-a': '2' } }, 'invalid_header'],
    [{ cookies: { a: 'x;admin=1' } }, 'invalid_cookie'],
    [{ cookies: { a: 'x\r\n' } }, 'invalid_cookie'],
    [{ cookies: { 'a=b': 'x' } }, 'invalid_cookie'],
    [{ auth: { username: 'a:b', password: 'c' } }, 'invalid_field'],
    [{ auth: { username: 'a' } }, 'invalid_field'],
    [{ params: { a: { b: 1 } } }, 'invalid_field'],
    [{ params: 'a=1' }, 'invalid_field'],
    [{ data: [1, 2] }, 'invalid_field'],
    [{ method: 'TRACE' }, 'invalid_method'],
    [{ api_url: 'not a url' }, 'invalid_url'],
  ])('refuses %j with %s', (fields, code) => {
    expect(refusal({ api_url: target, method: 'GET', ...fields }).reason).toBe(code);
  });

  it('refuses our own payment header when it carries a line break', () => {
    expect(buildTargetRequest({ api_url: target, method: 'GET' }, { paymentHeader: 'a\r\nb: c' })).toMatchObject({
      ok: false,
      reason: 'invalid_header',
    });
  });

  it('upper-cases the method', () => {
    expect(built({ api_url: target, method: 'patch' }).method).toBe('PATCH');
  });
});
