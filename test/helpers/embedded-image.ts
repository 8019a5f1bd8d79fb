import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { apiDatabaseOptions, startEmbeddedDatabase } from '../../services/api/src/db/embedded.js';
import { migrate } from '../../services/api/src/db/migrate.js';
import { createPool } from '../../services/api/src/db/pool.js';
import { migrateQueue } from '../../services/api/src/qc/queue.js';

/**
 * The API's embedded-database image (.cache/embedded-db), made ahead of a test that starts the API on its
 * embedded PGlite: on a fresh clone there is none yet, and initdb can outlast a harness' 90 s wait for
 * /healthz. Made as the API's own start would (services/api/src/db/embedded-image.ts), in a throwaway
 * data folder, under the calling hook's longer timeout. Here, not in a package's test/, because it needs
 * the API's own code and a package's tests import no other package.
 */
export async function warmEmbeddedImage(): Promise<void> {
  const warm = mkdtempSync(join(tmpdir(), 'embedded-warm-'));
  try {
    const embedded = await startEmbeddedDatabase(apiDatabaseOptions(warm));
    if (embedded.origin !== 'image') {
      const pool = createPool(embedded.url, { max: 1 });
      await migrate(pool);
      await migrateQueue(pool);
      await pool.end();
      await embedded.saveImage();
    }
    await embedded.close();
  } finally {
    rmSync(warm, { recursive: true, force: true });
  }
}
