/**
 * Every configuration variable that holds a URL, and malformed forms of a URL with a secret in
 * it (credentials, an API key in the path or the query): a start must stop on each without
 * printing the secret, or any part of it.
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
  // A password with no "@host" after it: the password reads as a port that is not a number.
  `https://alice:${SECRET}`,
  `http://rpc.example.org:${SECRET}/v2/key`,
  `https://:${SECRET}`,
  `http://[${SECRET}]:8545/`,
] as const;

/**
 * A URL of the variable's own scheme with a password and no "@host" after it (the form that was
 * once printed whole), two ways.
 */
export function passwordWithoutHost(variable: (typeof URL_VARIABLES)[number], index: number): string {
  const scheme = variable === 'DATABASE_URL' ? 'postgres' : 'https';
  return index % 2 === 0 ? `${scheme}://alice:${SECRET}` : `${scheme}://db.example.org:${SECRET}/v2/key`;
}

/** The parts of SECRET (five characters or more, in any case) that `output` shows: none, for a start that keeps it. */
export function partsOfSecretIn(output: string): string[] {
  const shown = output.toLowerCase();
  const parts: string[] = [];
  for (let start = 0; start + 5 <= SECRET.length; start += 1) {
    const part = SECRET.slice(start, start + 5);
    if (shown.includes(part.toLowerCase())) parts.push(part);
  }
  return parts;
}
