import type { Handler } from './types';

export const getDocs: Handler<'getDocs'> = (_ctx, { docsHtml }) =>
  Promise.resolve({
    status: 200,
    raw: docsHtml,
    contentType: 'text/html; charset=utf-8',
  });
