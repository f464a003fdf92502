/**
 * Every configuration variable that holds a URL, and malformed forms of a URL with a secret in
 * it (credentials, an API key in the path or the query): a start must stop on each without
 * printing the secret.
 */
export const URL_VARIABLES = [
  'RPC_URL_BASE',
  'RPC_URL_BASE_SEPOLIA',
  'RPC_URL_SKALE_BASE',
  'RPC_URL_SKALE_BASE_SEPOLIA',
  'RPC_URL_SOLANA',
  'RPC_URL_SOLANA_DEVNET',
  'FACILITATOR_URL',
  'LLM_BASE_URL',
  'PUBLIC_BASE_URL',
  'DATABASE_URL',
] as const;

export const SECRET = 'S3CRETpw';

export const MALFORMED_WITH_SECRETS = [
  `http://u:${SECRET}@h:99999/`,
  `http://u:${SECRET}@rpc example.org/v2/${SECRET}`,
  `u:${SECRET}@rpc.example.org/${SECRET}`,
  `http://u:${SECRET}@/path?key=${SECRET}`,
  SECRET,
  `http://u:pa/${SECRET}@h:1/`,
] as const;
