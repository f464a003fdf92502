/**
 * The sandbox client's batch-settlement channels between runs of `npm run sandbox:pay`: one small
 * JSON file in DATA_DIR implementing @x402/evm's ClientChannelStorage, so that a run after the one
 * that deposited sends a voucher only. The file belongs to one start of the sandbox (its runId): the
 * sandbox's chains start fresh at every start, and a channel of an earlier start is not on them, so
 * the channels of another start are forgotten, not reused.
 */
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import type { BatchSettlementClientContext, ClientChannelStorage } from '@x402/evm/batch-settlement/client';

export const CHANNELS_FILE = 'sandbox-channels.json';

interface ChannelsFile {
  /** The sandbox start these channels were opened in (sandbox.json's runId). */
  sandboxRunId: string;
  /** The client's context of each channel, by channel id (lower case). */
  channels: Record<string, BatchSettlementClientContext>;
}

export class SandboxChannelStorage implements ClientChannelStorage {
  constructor(
    private readonly file: string,
    private readonly sandboxRunId: string,
  ) {}

  /** The channels of this sandbox start; none when the file is missing, unreadable or of another start. */
  read(): Record<string, BatchSettlementClientContext> {
    let stored: { sandboxRunId?: unknown; channels?: unknown } | null;
    try {
      stored = JSON.parse(readFileSync(this.file, 'utf8')) as { sandboxRunId?: unknown; channels?: unknown } | null;
    } catch {
      return {};
    }
    if (stored?.sandboxRunId !== this.sandboxRunId || typeof stored.channels !== 'object' || stored.channels === null)
      return {};
    return stored.channels as ChannelsFile['channels'];
  }

  private write(channels: Record<string, BatchSettlementClientContext>): void {
    const content: ChannelsFile = { sandboxRunId: this.sandboxRunId, channels };
    // Written whole and then renamed: a run stopped midway leaves the previous file, never half of one.
    const partial = `${this.file}.partial`;
    writeFileSync(partial, JSON.stringify(content, null, 2) + '\n', { mode: 0o600 });
    renameSync(partial, this.file);
  }

  get(key: string): Promise<BatchSettlementClientContext | undefined> {
    return Promise.resolve(this.read()[key.toLowerCase()]);
  }

  set(key: string, context: BatchSettlementClientContext): Promise<void> {
    this.write({ ...this.read(), [key.toLowerCase()]: context });
    return Promise.resolve();
  }

  delete(key: string): Promise<void> {
    const id = key.toLowerCase();
    this.write(Object.fromEntries(Object.entries(this.read()).filter(([channelId]) => channelId !== id)));
    return Promise.resolve();
  }
}
