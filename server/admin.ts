/**
 * Operator commands: `npm run admin -- <command> [options]`. They use the same configuration as the
 * service (DATABASE_URL, or the embedded Postgres in DATA_DIR: the running service's when it is up).
 */
import { createDb, migrateToLatest } from '../db/index';
import { runningEmbeddedUrl, startEmbeddedPostgres } from '../db/embedded';
import { ConfigError, loadConfig } from '../payments/basics/config';
import { USAGE, UsageError, runAdminCommand } from './adminCommands';
import { floatReport } from './floatCommand';

async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig(process.env);
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`configuration error: ${error.message}\n`);
      process.exit(1);
    }
    throw error;
  }
  const argv = process.argv.slice(2);
  if (argv.length === 0 || argv[0] === 'help' || argv.includes('--help')) {
    process.stdout.write(USAGE);
    return;
  }
  let url = config.databaseUrl ?? runningEmbeddedUrl(config.dataDir);
  const embedded = url ? undefined : await startEmbeddedPostgres({ dataDir: config.dataDir });
  if (url === undefined) {
    if (!embedded) throw new Error('no database URL, and the embedded Postgres was not started');
    url = embedded.url;
  }
  const handle = createDb(url);
  try {
    await migrateToLatest(handle.db);
    const print = (line: string) => process.stdout.write(`${line}\n`);
    if (argv[0] === 'float') {
      const rest = argv.slice(1).filter((arg) => arg !== '--stored');
      if (rest.length > 0) throw new UsageError(`float: unknown option ${rest[0]}`);
      await floatReport(handle.db, config, print, { stored: argv.includes('--stored') });
    } else {
      await runAdminCommand(handle.db, argv, print);
    }
  } catch (error) {
    if (error instanceof UsageError) {
      process.stderr.write(`${error.message}\n\n${USAGE}`);
      process.exitCode = 2;
    } else {
      throw error;
    }
  } finally {
    await handle.close();
    await embedded?.stop();
  }
}

await main();
