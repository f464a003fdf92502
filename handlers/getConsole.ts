import type { Handler } from './types';

export const getConsole: Handler<'getConsole'> = (_ctx, { consolePage }) =>
  Promise.resolve({
    status: 200,
    raw: consolePage.html,
    contentType: 'text/html; charset=utf-8',
    headers: { 'Content-Security-Policy': consolePage.contentSecurityPolicy, 'Cache-Control': 'no-store' },
  });
