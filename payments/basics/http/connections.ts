/**
 * Reused connections to targets. A pooled socket is only ever handed to a request whose own guard
 * check produced the very destination the socket was opened to: the pool is keyed by scheme, host
 * name, port and the exact set of vetted addresses. A host that now resolves elsewhere gets a new
 * pool (and a new, checked connection); the old pool's idle sockets time out.
 *
 * Bounds: at most `maxPools` destinations are kept (least recently used dropped first, its idle
 * sockets closed, its busy ones left to finish), idle sockets close after `idleMs` or sooner when
 * the target's Keep-Alive header says so, and each destination keeps at most `maxIdlePerPool`.
 */
import http from 'node:http';
import https from 'node:https';
import type { VettedTarget } from './guard';

export interface ConnectionPoolOptions {
  maxPools?: number;
  maxIdlePerPool?: number;
  idleMs?: number;
}

export const DEFAULT_CONNECTION_POOL: Required<ConnectionPoolOptions> = {
  maxPools: 256,
  maxIdlePerPool: 64,
  idleMs: 2_000,
};

export class TargetConnections {
  private readonly pools = new Map<string, http.Agent>();
  private readonly options: Required<ConnectionPoolOptions>;

  constructor(options: ConnectionPoolOptions = {}) {
    this.options = { ...DEFAULT_CONNECTION_POOL, ...options };
  }

  /** The pool for this vetted destination; created on first use. */
  agentFor(target: VettedTarget): http.Agent {
    const key = destinationKey(target);
    const existing = this.pools.get(key);
    if (existing) {
      // Map order is insertion order: re-inserting marks it most recently used.
      this.pools.delete(key);
      this.pools.set(key, existing);
      return existing;
    }
    const settings: http.AgentOptions = {
      keepAlive: true,
      maxFreeSockets: this.options.maxIdlePerPool,
      // Applies to idle sockets only: a request's own deadline bounds a busy one.
      timeout: this.options.idleMs,
      scheduling: 'lifo',
    };
    const agent = target.url.protocol === 'https:' ? new https.Agent(settings) : new http.Agent(settings);
    this.pools.set(key, agent);
    while (this.pools.size > this.options.maxPools) {
      const [oldestKey, oldest] = this.pools.entries().next().value as [string, http.Agent];
      this.pools.delete(oldestKey);
      retire(oldest);
    }
    return agent;
  }

  /** Idle sockets held now, over every destination (for tests and operators). */
  idleSockets(): number {
    let count = 0;
    for (const agent of this.pools.values()) {
      for (const sockets of Object.values(agent.freeSockets)) count += sockets?.length ?? 0;
    }
    return count;
  }

  /** Closes every idle socket and forgets every pool; busy sockets finish their exchange and close. */
  close(): void {
    for (const agent of this.pools.values()) retire(agent);
    this.pools.clear();
  }
}

function destinationKey(target: VettedTarget): string {
  const addresses = target.addresses.map(({ address, family }) => `${family}/${address}`).sort();
  return `${target.url.protocol}//${target.hostname}:${target.port}|${addresses.join(',')}`;
}

/** Closes the idle sockets and keeps none from now on; sockets in use end with their exchange. */
function retire(agent: http.Agent): void {
  agent.keepSocketAlive = () => false;
  for (const sockets of Object.values(agent.freeSockets)) {
    for (const socket of sockets ?? []) socket.destroy();
  }
}
