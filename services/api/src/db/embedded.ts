import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { apiSchema, chooseImage, DEFAULT_IMAGE_CACHE_DIR, restoreImage, saveImage, lazyPostgis, type SchemaFingerprint } from './embedded-image.js';
import { servePGlite } from './pglite-server.js';

/**
 * The embedded development database: PGlite (PostgreSQL compiled to WebAssembly) with PostGIS,
 * served over TCP on 127.0.0.1 so the API reaches it through `pg` with a plain connection string,
 * exactly as it reaches a real PostgreSQL. Used when DATABASE_URL is unset.
 */
export interface EmbeddedDatabase {
  /** postgres://… connection string for `pg`. */
  url: string;
  /**
   * How the data folder came about: `existing` (opened as it was), `image` (restored from an image
   * of the current schema), `stale-image` (from an older image; the migration run adds the rest),
   * `initdb` (created from scratch), `memory` (no folder).
   */
  origin: 'existing' | 'image' | 'stale-image' | 'initdb' | 'memory';
  /**
   * Call once the schema is applied and before anything else is written: when this start created
   * the folder without an image of the current schema, the folder becomes that image for the
   * fresh starts after it. Otherwise it does nothing.
   */
  saveImage(): Promise<void>;
  close(): Promise<void>;
}

/** What the embedded database logs: a pino logger, or its stand-in inside the database thread. */
export interface EmbeddedLog {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
}

export interface EmbeddedDatabaseOptions {
  /** Folder of the persistent database; undefined keeps it in memory (tests). */
  dataDir?: string;
  port?: number;
  logger?: EmbeddedLog;
  /**
   * With a data folder: start a fresh (empty) folder from a cached image of this schema instead of
   * running initdb (see embedded-image.ts). Unset: no images are read or written.
   */
  image?: { schema: SchemaFingerprint; cacheDir?: string };
}

/**
 * Opens the embedded database. With `thread` (the module URL of embedded-thread.ts or of its
 * compiled form), PGlite runs in a worker thread of its own: see startEmbeddedDatabaseThread.
 */
export async function startEmbeddedDatabase(options: EmbeddedDatabaseOptions & { thread?: string | URL } = {}): Promise<EmbeddedDatabase> {
  const { thread, ...rest } = options;
  return thread ? startEmbeddedDatabaseThread(thread, rest) : openEmbeddedDatabase(rest);
}

/** The API's embedded database: DATA_DIR/pglite, a fresh folder starting from the image of its schema. */
export function apiDatabaseOptions(dataDir: string, logger?: EmbeddedLog): EmbeddedDatabaseOptions {
  return { dataDir: join(dataDir, 'pglite'), ...(logger ? { logger } : {}), image: { schema: apiSchema() } };
}

async function openEmbeddedDatabase(options: EmbeddedDatabaseOptions): Promise<EmbeddedDatabase> {
  // Loaded here rather than at the top: with a database thread, the API's own thread never needs it.
  const { PGlite } = await import('@electric-sql/pglite');
  const release = options.dataDir ? lockDataDir(options.dataDir) : () => undefined;
  try {
    const started = performance.now();
    const cacheDir = options.image?.cacheDir ?? DEFAULT_IMAGE_CACHE_DIR;
    let origin: EmbeddedDatabase['origin'] = 'memory';
    if (options.dataDir) {
      origin = existsSync(join(options.dataDir, 'PG_VERSION')) ? 'existing' : 'initdb';
      // Only an empty folder is filled from an image; anything else is left to PGlite as before.
      const image = origin === 'initdb' && options.image && readdirSync(options.dataDir).length === 0 ? chooseImage(cacheDir, options.image.schema) : undefined;
      if (image) {
        await restoreImage(image.dir, options.dataDir);
        origin = image.current ? 'image' : 'stale-image';
      }
    }
    const db = await PGlite.create({
      ...(options.dataDir ? { dataDir: options.dataDir } : {}),
      extensions: { postgis: await lazyPostgis(cacheDir) },
      // PostgreSQL zeroes its shared buffers at every start: 128 MB (initdb's default) cost a fifth
      // of opening the database. 32 MB hold a development database; the OS caches the data folder.
      startParams: [...PGlite.defaultStartParams, '-c', 'shared_buffers=32MB'],
    });
    const server = await servePGlite(db, { port: options.port ?? 0 });
    options.logger?.info(
      { dataDir: options.dataDir ?? '(memory)', origin, port: server.port, ms: Math.round(performance.now() - started) },
      'embedded database ready',
    );
    let saved = !(options.image && (origin === 'initdb' || origin === 'stale-image'));
    return {
      url: `postgres://postgres@${server.host}:${server.port}/postgres`,
      origin,
      async saveImage() {
        if (saved || !options.image) return;
        saved = true;
        const savingStarted = performance.now();
        try {
          // Flushed to the data files first, so the image needs no recovery when it is opened.
          await db.exec('CHECKPOINT');
          const tar = Buffer.from(await (await db.dumpDataDir('none')).arrayBuffer());
          const dir = await saveImage(cacheDir, options.image.schema, tar);
          options.logger?.info({ image: dir, ms: Math.round(performance.now() - savingStarted) }, 'embedded database image saved for fresh starts');
        } catch (error) {
          // Only a later start's speed depends on it: this one carries on.
          options.logger?.warn({ err: error }, 'could not save the embedded database image');
        }
      },
      async close() {
        await server.close();
        await db.close();
        release();
      },
    };
  } catch (error) {
    release();
    throw error;
  }
}

/** Messages between startEmbeddedDatabaseThread and embedded-thread.ts. */
export type ThreadRequest = { call: 'saveImage' | 'close' };
export type ThreadReply =
  | { ready: { url: string; origin: EmbeddedDatabase['origin'] } }
  | { failed: unknown }
  | { log: { level: 'info' | 'warn'; fields: object; message: string } }
  | { done: 'saveImage' | 'close'; error?: unknown };

/**
 * The embedded database in a worker thread: PGlite's start (WebAssembly, the data folder, the
 * backend) is a second of CPU, and in its own thread it runs on the second core while the API's
 * thread loads its modules (`npm start` begins it before importing the rest of the API). Its
 * PostgreSQL wire server listens in that thread too, so the database's work never holds up the
 * API's event loop. Same interface and behaviour as in-thread; the thread ends with close().
 */
async function startEmbeddedDatabaseThread(entry: string | URL, options: EmbeddedDatabaseOptions): Promise<EmbeddedDatabase> {
  const { logger, ...workerData } = options;
  const worker = new Worker(entry, { workerData });
  const pending = new Map<string, { resolve: () => void; reject: (error: unknown) => void }>();
  let fail: (error: unknown) => void = () => undefined;
  const ready = new Promise<{ url: string; origin: EmbeddedDatabase['origin'] }>((resolve, reject) => {
    fail = reject;
    worker.on('message', (reply: ThreadReply) => {
      if ('ready' in reply) resolve(reply.ready);
      else if ('failed' in reply) reject(reply.failed);
      else if ('log' in reply) logger?.[reply.log.level](reply.log.fields, reply.log.message);
      else {
        const call = pending.get(reply.done);
        pending.delete(reply.done);
        if (reply.error === undefined) call?.resolve();
        else call?.reject(reply.error);
      }
    });
  });
  const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
  worker.once('error', (error) => {
    fail(error);
    for (const call of pending.values()) call.reject(error);
    pending.clear();
  });
  void exited.then(() => {
    const gone = new Error('the embedded database thread exited');
    fail(gone);
    for (const call of pending.values()) call.reject(gone);
    pending.clear();
  });
  const call = (name: ThreadRequest['call']): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      pending.set(name, { resolve, reject });
      worker.postMessage({ call: name } satisfies ThreadRequest);
    });
  let info: Awaited<typeof ready>;
  try {
    info = await ready;
  } catch (error) {
    await worker.terminate();
    throw error;
  }
  let closing: Promise<void> | undefined;
  // A database thread that ends by itself (PGlite failed) takes the process down with it, as the
  // same failure in this thread would: an API must not carry on without its database.
  void exited.then(() => {
    if (!closing) process.nextTick(() => {
      throw new Error('the embedded database thread ended unexpectedly');
    });
  });
  return {
    ...info,
    saveImage: () => call('saveImage'),
    close: () =>
      (closing ??= (async () => {
        await call('close');
        await exited;
      })()),
  };
}

/**
 * PGlite is a single process's database: a second process opening the same folder would corrupt it.
 * A pid file refuses that with a clear message; a stale file from a crashed process is taken over.
 */
function lockDataDir(dataDir: string): () => void {
  mkdirSync(dataDir, { recursive: true });
  const lockFile = join(dataDir, '..', `${dataDir.split(/[\\/]/).pop() ?? 'pglite'}.pid`);
  try {
    const holder = Number(readFileSync(lockFile, 'utf8'));
    if (Number.isInteger(holder) && holder !== process.pid && isAlive(holder)) {
      throw new Error(`the embedded database in ${dataDir} is in use by process ${holder}; stop it or set DATABASE_URL`);
    }
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  writeFileSync(lockFile, String(process.pid));
  return () => rmSync(lockFile, { force: true });
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
