/**
 * The service as `npm start` runs it (configured from the environment, logging to stdout), except
 * that once a relay has settled its client's payment, and before it pays the target, it writes
 * the relay transaction's id to the file named by its argument and waits until that file is
 * removed. A test kills the process there to stop it between the two legs of a relay.
 *
 *   node --import tsx test/support/pausing-service.ts <file>
 */
import { existsSync, writeFileSync } from 'node:fs';
import { loadConfig } from '../../payments/config';
import { createLogger } from '../../server/logger';
import { startService } from '../../server/service';

const markerFile = process.argv[2];
if (!markerFile) {
  process.stderr.write('usage: pausing-service.ts <file>\n');
  process.exit(2);
}

const config = loadConfig(process.env);
const service = await startService(config, {
  logger: createLogger(config.logLevel),
  hooks: {
    async afterClientSettled(relayTxId) {
      writeFileSync(markerFile, String(relayTxId));
      while (existsSync(markerFile)) await new Promise((resolve) => setTimeout(resolve, 50));
    },
  },
});

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    service.stop().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  });
}
