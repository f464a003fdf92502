/**
 * When `npm start` runs the sandbox, and how it is loaded. The sandbox itself (local chains, Solana
 * clusters, facilitator, demo targets) lives in devnet/ and needs the development packages; a
 * production install (`npm ci --omit=dev`) has none of them, so it is only ever loaded here,
 * dynamically, and its absence is explained in one line instead of a stack trace.
 */
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
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
  /**
   * Once the database is migrated, before the service starts: the demo organisation and its API
   * key (`ready` creates them when `prepare` was not called).
   */
  prepare(db: Db): Promise<void>;
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

/**
 * Empties the data directory on `reset` and creates it, before anything is written into it (the
 * sandbox's keys, the embedded Postgres that `npm start` starts beside the sandbox).
 */
export function prepareDataDir(options: Pick<SandboxOptions, 'dataDir' | 'reset' | 'log'>): void {
  const dataDir = path.resolve(options.dataDir);
  if (options.reset && existsSync(dataDir)) {
    options.log.warn({ dataDir }, 'sandbox reset: removing the data directory');
    rmSync(dataDir, { recursive: true, force: true });
  }
  mkdirSync(dataDir, { recursive: true });
}

function unavailable(missing: string): SandboxUnavailableError {
  return new SandboxUnavailableError(
    `the sandbox (nothing configured) needs the development packages, and ${missing} is not installed: ` +
      'run `npm install` (without --omit=dev), or configure EVM_PRIVATE_KEY, SOLANA_PRIVATE_KEY and RPC_URL_<NETWORK> to run for real',
  );
}

/**
 * Throws SandboxUnavailableError unless the development packages are installed, at once: one of
 * them is resolved, not loaded (loading the sandbox takes seconds). A production install
 * (`npm ci --omit=dev`) that is not configured exits with one line, having started and written
 * nothing.
 */
export function checkSandboxInstalled(): void {
  try {
    import.meta.resolve('hardhat');
  } catch (error) {
    const missing = missingPackage(error);
    if (missing === undefined) throw error;
    throw unavailable(missing);
  }
}

/** Loads the sandbox, or throws SandboxUnavailableError when a development package it runs on is missing. */
export async function loadSandbox(): Promise<{ startSandbox(options: SandboxOptions): Promise<Sandbox> }> {
  try {
    return await import('../devnet/sandbox');
  } catch (error) {
    const missing = missingPackage(error);
    if (missing === undefined) throw error;
    throw unavailable(missing);
  }
}
