/**
 * A dedicated connection that LISTENs on one channel and reconnects when it is lost. `onState`
 * says whether notifications are being received: a consumer that relies on them (a cache) must
 * stop relying on them while this reports false, since anything announced meanwhile is missed.
 */
import pg from 'pg';

export interface ChannelListener {
  /** Whether notifications are being received right now. */
  listening(): boolean;
  stop(): Promise<void>;
}

export interface ListenOptions {
  onNotify: (payload: string) => void;
  onState: (listening: boolean) => void;
  onError?: (error: Error) => void;
  /** Wait before reconnecting after a lost connection. */
  retryMs?: number;
}

const CHANNEL_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export function listenTo(connectionString: string, channel: string, options: ListenOptions): ChannelListener {
  if (!CHANNEL_NAME.test(channel)) throw new RangeError(`not a plain channel name: ${channel}`);
  const retryMs = options.retryMs ?? 1_000;
  let stopped = false;
  let live = false;
  let client: pg.Client | undefined;
  let retry: NodeJS.Timeout | undefined;

  const setLive = (next: boolean) => {
    if (live === next) return;
    live = next;
    options.onState(next);
  };

  /** A failed connect ends in `lost`, which schedules the next one: nothing is left to await. */
  const reconnect = () => {
    retry = undefined;
    if (stopped) return;
    void connect();
  };

  const lost = (error?: Error) => {
    if (error) options.onError?.(error);
    setLive(false);
    const gone = client;
    client = undefined;
    gone?.removeAllListeners();
    gone?.on('error', () => {});
    void gone?.end().catch(() => {});
    if (!stopped && !retry) retry = setTimeout(reconnect, retryMs);
  };

  async function connect(): Promise<void> {
    const next = new pg.Client({ connectionString, connectionTimeoutMillis: 10_000 });
    client = next;
    next.on('error', (error) => client === next && lost(error));
    next.on('end', () => client === next && lost());
    next.on('notification', (message) => {
      if (message.channel === channel) options.onNotify(message.payload ?? '');
    });
    try {
      await next.connect();
      await next.query(`listen ${channel}`);
      if (client === next && !stopped) setLive(true);
    } catch (error) {
      if (client === next) lost(error as Error);
    }
  }

  void connect();
  return {
    listening: () => live,
    /** Ends listening; onState is not called for it. */
    async stop() {
      stopped = true;
      if (retry) clearTimeout(retry);
      live = false;
      const gone = client;
      client = undefined;
      gone?.removeAllListeners();
      gone?.on('error', () => {});
      await gone?.end().catch(() => {});
    },
  };
}
