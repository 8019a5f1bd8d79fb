import type { Logger } from 'pino';
import { closeGracefully, listen } from '../../shared/http-server.js';
import { createApp } from './app.js';
import { createAuthenticator, createIdentityAdmin } from './auth/index.js';
import { loadOrCreateDevKeys } from './auth/dev-keys.js';
import type { ApiConfig } from './config.js';
import { apiDatabaseOptions, startEmbeddedDatabase, type EmbeddedDatabase } from './db/embedded.js';
import { migrate } from './db/migrate.js';
import { API_SESSION_SETTINGS, createPool } from './db/pool.js';
import { serveApp } from './http/server.js';
import { migrateQueue } from './qc/queue.js';
import type { QcWorker } from './qc/worker.js';
import { startTileChangeFeed, type TileChangeFeed } from './tiles/changes.js';

export interface RunningApi {
  port: number;
  /** The database the API uses (the embedded one's URL when DATABASE_URL is unset). */
  databaseUrl: string;
  /** Stop accepting requests, drain, close the pool and the embedded database. */
  close(): Promise<void>;
}

/**
 * Boot the API: database (embedded when DATABASE_URL is unset), migrations, authenticator, HTTP
 * server. Shared by `npm run api` (server.ts) and `npm start` (scripts/start.ts).
 */
export interface StartOptions {
  /**
   * The embedded database (DATABASE_URL unset), already being started by the caller with
   * apiDatabaseOptions; startApi then owns it (closes it on failure and in close()).
   */
  embedded?: Promise<EmbeddedDatabase>;
}

/** Thrown by startApi when `signal` aborted it; everything it had opened is closed again. */
export class StartAborted extends Error {
  override readonly name = 'StartAborted';
}

/**
 * `signal` (a stop requested during start-up) is checked between the steps — after the embedded
 * database is up, between migration files, before the worker and before listening — never inside
 * one, so an abort never leaves a half-created data folder or a half-applied migration.
 */
export async function startApi(config: ApiConfig, logger: Logger, signal?: AbortSignal, options: StartOptions = {}): Promise<RunningApi> {
  const checkpoint = (): void => {
    if (signal?.aborted) throw new StartAborted('the start was stopped');
  };
  let embedded: EmbeddedDatabase | undefined;
  if (!config.databaseUrl) {
    // A fresh folder starts from a cached image of what the two migration runs below apply.
    embedded = await (options.embedded ?? startEmbeddedDatabase(apiDatabaseOptions(config.dataDir, logger)));
  }
  const databaseUrl = config.databaseUrl ?? embedded!.url;
  // The session settings are PostgreSQL's; the embedded PGlite has no JIT and one session for all.
  const db = createPool(databaseUrl, { logger, ...(config.databaseUrl ? { settings: API_SESSION_SETTINGS } : {}) });
  let schemaReady: Promise<void> | undefined;
  let tileChanges: TileChangeFeed | undefined;
  try {
    checkpoint();
    // The schema is checked (and migrated) by the database while this thread builds the app, which
    // needs no query; nothing listens before both are done.
    schemaReady = (async () => {
      await migrate(db, { logger, ...(signal ? { signal } : {}) });
      checkpoint();
      // graphile-worker's schema: the QC routes queue side effects with graphile_worker.add_job.
      await migrateQueue(db, logger);
      await embedded?.saveImage();
    })();
    schemaReady.catch(() => undefined); // awaited below, or in the catch
    const authenticator = await createAuthenticator({ ...config.auth, production: config.production, dataDir: config.dataDir, identity: config.identity });
    const identityAdmin = config.identity.kratosAdminUrl ? await createIdentityAdmin(config.identity.kratosAdminUrl) : undefined;
    const devKeys = !config.production && !config.auth.jwksUrl ? await loadOrCreateDevKeys(config.dataDir) : undefined;
    // Listens for feature changes on a connection of its own; covered once the schema has its table.
    tileChanges = startTileChangeFeed({ connectionString: databaseUrl, db, logger });
    // A slow or stalled client must not hold a connection forever (http/server.ts has the limits).
    const server = await serveApp(createApp({ db, config, authenticator, identityAdmin, logger, devKeys, production: config.production, tileChanges }));
    await schemaReady;
    checkpoint();
    const port = await listen(server, config.port);
    logger.info({ port, database: embedded ? 'embedded' : 'external' }, 'api listening');
    // A parent (npm start) learns the port here too, whatever LOG_LEVEL hides.
    process.send?.({ listening: port });
    // The embedded database loads PostGIS when a statement first needs it (embedded-image.ts,
    // lazyPostgis): done now, so the first request using it does not wait for that. A request
    // meanwhile waits its turn at the database, as any request does.
    if (embedded) void db.query('SELECT postgis_lib_version()').catch((error: unknown) => logger.warn({ err: error }, 'could not load PostGIS ahead of use'));
    // The QC worker starts once the API answers: no request waits for it (the routes only queue
    // jobs, in the queue schema migrated above), and the jobs it runs wait in the queue meanwhile.
    // A worker that cannot start still fails the boot: the returned promise rejects, and the caller
    // exits, instead of leaving an API behind whose jobs never run.
    let workerPool: ReturnType<typeof createPool> | undefined;
    let worker: QcWorker | undefined;
    if (config.worker.enabled) {
      workerPool = createPool(databaseUrl, { logger, max: config.worker.concurrency + 3 });
      try {
        // Loaded only here: its tasks, exporters and mailer are about 12 MiB an API without it never needs.
        const { startQcWorker } = await import('./qc/worker.js');
        // A stop requested while the module loaded (a second or more under load) ends the start
        // here, before a worker exists: stopping a worker in the middle of its start hung until the
        // parent's kill timeout (npm-start.test, the signal after 'api listening').
        checkpoint();
        worker = await startQcWorker({ pool: workerPool, settings: config.exports, worker: config.worker, logger });
      } catch (error) {
        await workerPool.end().catch(() => undefined);
        await closeGracefully(server).catch(() => undefined);
        throw error;
      }
    }
    return {
      port,
      databaseUrl,
      async close() {
        await closeGracefully(server);
        await tileChanges?.close();
        await worker?.stop();
        await workerPool?.end();
        await db.end();
        await embedded?.close();
      },
    };
  } catch (error) {
    // A migration under way finishes first (each is all or nothing), then everything closes.
    await schemaReady?.catch(() => undefined);
    await tileChanges?.close().catch(() => undefined);
    await db.end().catch(() => undefined);
    await embedded?.close().catch(() => undefined);
    throw error;
  }
}
