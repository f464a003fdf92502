/** Starts the real service in-process against a fresh test database, with a quiet logger. */
import { pino } from 'pino';
import { loadConfig, type Config } from '../../payments/basics/config';
import { startService, type Service, type ServiceOptions } from '../../server/service';
import { contractClient, type ContractClient } from './contract';
import { createTestDatabase, type TestDatabase } from './database';

export interface TestService {
  service: Service;
  client: ContractClient;
  database: TestDatabase;
  config: Config;
  stop(): Promise<void>;
}

export async function startTestService(
  env: Record<string, string> = {},
  options: ServiceOptions = {},
): Promise<TestService> {
  const database = await createTestDatabase();
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'silent',
    SHUTDOWN_GRACE_MS: '2000',
    ...env,
    DATABASE_URL: database.url,
  });
  const service = await startService(config, {
    logger: pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }),
    ...options,
  });
  return {
    service,
    client: contractClient(service.url),
    database,
    config,
    async stop() {
      await service.stop();
      await database.drop();
    },
  };
}
