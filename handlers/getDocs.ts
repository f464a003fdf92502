import type { Handler } from './types';

export const getDocs: Handler<'getDocs'> = async (_ctx, { docsHtml }) => ({
  status: 200,
  raw: docsHtml,
  contentType: 'text/html; charset=utf-8',
});
