import type { Logger } from 'pino';
import type { Db } from '../../db/pool.js';
import type { ExportsSettings } from '../../exports/config.js';
import type { Mailer } from '../../notifications/mailer.js';

/** What every QC task runs with (tasks.ts, and osm-batch.ts for the OSM export's batches). */
export interface TaskDeps {
  db: Db;
  settings: ExportsSettings;
  /** null when SMTP_URL is unset (mail jobs are recorded as skipped). */
  mailer: Mailer | null;
  logger: Logger;
  /** This worker process, as registered in qc.worker_processes. */
  processId: string;
  clock?: () => Date;
}
