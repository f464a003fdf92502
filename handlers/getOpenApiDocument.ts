import type { Handler } from './types';

export const getOpenApiDocument: Handler<'getOpenApiDocument'> = async (_ctx, { document }) => ({
  status: 200,
  body: document as never,
});
