/**
 * `npm run seed`: loads the demo city (imports/demo.ts, 1 000 features) into DATABASE_URL, or into the
 * embedded database in DATA_DIR when DATABASE_URL is unset (stop `npm start` first: the embedded
 * database has one user at a time), through the import service: validated and written in one
 * transaction with the change note "demo city", as user `demo`. Migrates first, so it also works on a
 * fresh database. Exit codes: 0 done, 1 failed, 2 bad configuration.
 */
import { join } from 'node:path';
import { runMain } from '../../../shared/config.js';
import { createLogger } from '../../../shared/logger.js';
import { loadMigrateConfig } from '../config.js';
import { startEmbeddedDatabase } from '../db/embedded.js';
import { migrate } from '../db/migrate.js';
import { createPool } from '../db/pool.js';
import { demoCity } from './demo.js';
import { createImportService } from './service.js';

runMain(async () => {
  const config = loadMigrateConfig();
  const logger = createLogger('seed', { level: config.logLevel });
  const embedded = config.databaseUrl ? undefined : await startEmbeddedDatabase({ dataDir: join(config.dataDir, 'pglite'), logger });
  const pool = createPool(config.databaseUrl ?? embedded!.url, { max: 1, logger });
  try {
    await migrate(pool, { logger });
    const started = performance.now();
    const result = await createImportService(pool).commitRows({ id: 'demo', role: 'admin', via: 'jwt' }, demoCity(), undefined, 'demo city');
    logger.info({ imported: result.imported, invalid: result.invalid, ms: Math.round(performance.now() - started) }, 'demo city loaded');
  } finally {
    await pool.end();
    await embedded?.close();
  }
});
