/**
 * `npm run migrate`: apply pending migrations to DATABASE_URL, or to the embedded database in
 * DATA_DIR when DATABASE_URL is unset — the platform's own, then the job queue's (graphile-worker
 * keeps its schema in its own migrations), so a database prepared ahead of deployment is complete.
 * Exit codes: 0 done, 1 a migration failed, 2 bad configuration.
 */
import { join } from 'node:path';
import { createLogger } from '../../../shared/logger.js';
import { runMain } from '../../../shared/config.js';
import { loadMigrateConfig } from '../config.js';
import { startEmbeddedDatabase } from './embedded.js';
import { migrateQueue } from '../qc/queue.js';
import { migrate } from './migrate.js';
import { createPool } from './pool.js';

runMain(async () => {
  const config = loadMigrateConfig();
  const logger = createLogger('migrate', { level: config.logLevel });
  const embedded = config.databaseUrl ? undefined : await startEmbeddedDatabase({ dataDir: join(config.dataDir, 'pglite'), logger });
  const pool = createPool(config.databaseUrl ?? embedded!.url, { max: 1, logger });
  try {
    const applied = await migrate(pool, { logger });
    logger.info({ applied }, applied.length ? 'migrations applied' : 'database already up to date');
    await migrateQueue(pool, logger);
  } finally {
    await pool.end();
    await embedded?.close();
  }
});
