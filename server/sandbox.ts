/**
 * When `npm start` runs the sandbox, and how it is loaded. The sandbox itself (local chains, Solana
 * clusters, facilitator, demo targets) lives in devnet/ and needs the development packages; a
 * production install (`npm ci --omit=dev`) has none of them, so it is only ever loaded here,
 * dynamically, and its absence is explained in one line instead of a stack trace.
 */
import type { Logger } from 'pino';
import type { Db } from '../db/index';

/** The variables whose presence means "this is a configured deployment", not a sandbox. */
function configuredVariables(env: NodeJS.ProcessEnv): string[] {
  return Object.keys(env).filter(
    (name) =>
      (name === 'EVM_PRIVATE_KEY' || name === 'SOLANA_PRIVATE_KEY' || name.startsWith('RPC_URL_')) && env[name]?.trim(),
  );
}

export function sandboxWanted(env: NodeJS.ProcessEnv): boolean {
  return env.NODE_ENV !== 'production' && configuredVariables(env).length === 0;
}

export interface Sandbox {
  /** Configuration the service starts with (RPC URLs, wallet keys, facilitator, SSRF allowance). */
  env: Record<string, string>;
  /** Once the service listens, before it says it is ready: the demo organisation, sandbox.json and the banner. */
  ready(baseUrl: string, db: Db): Promise<unknown>;
  stop(): Promise<void>;
}

export interface SandboxOptions {
  dataDir: string;
  reset: boolean;
  log: Logger;
  /** The process environment: a user's own SSRF_ALLOW_HOSTS is kept beside the sandbox's targets. */
  env: NodeJS.ProcessEnv;
  print?: (text: string) => void;
}

/** Thrown when the development packages the sandbox runs on are not installed. */
export class SandboxUnavailableError extends Error {}

function missingPackage(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  if (code !== 'ERR_MODULE_NOT_FOUND' && code !== 'MODULE_NOT_FOUND') return undefined;
  const message = String((error as { message?: unknown }).message);
  return /(?:Cannot find (?:package|module) )['"]([^'"]+)['"]/.exec(message)?.[1] ?? 'a development package';
}

export async function startSandbox(options: SandboxOptions): Promise<Sandbox> {
  let devnet: typeof import('../devnet/sandbox');
  try {
    devnet = await import('../devnet/sandbox');
  } catch (error) {
    const missing = missingPackage(error);
    if (missing === undefined) throw error;
    throw new SandboxUnavailableError(
      `the sandbox (nothing configured) needs the development packages, and ${missing} is not installed: ` +
        'run `npm install` (without --omit=dev), or configure EVM_PRIVATE_KEY, SOLANA_PRIVATE_KEY and RPC_URL_<NETWORK> to run for real',
    );
  }
  return devnet.startSandbox(options);
}
