import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import type { Logger } from 'pino';
import { chooseImage, DEFAULT_IMAGE_CACHE_DIR, restoreImage, saveImage, slimPostgis, type SchemaFingerprint } from './embedded-image.js';
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

export interface EmbeddedDatabaseOptions {
  /** Folder of the persistent database; undefined keeps it in memory (tests). */
  dataDir?: string;
  port?: number;
  logger?: Logger;
  /**
   * With a data folder: start a fresh (empty) folder from a cached image of this schema instead of
   * running initdb (see embedded-image.ts). Unset: no images are read or written.
   */
  image?: { schema: SchemaFingerprint; cacheDir?: string };
}

export async function startEmbeddedDatabase(options: EmbeddedDatabaseOptions = {}): Promise<EmbeddedDatabase> {
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
      extensions: { postgis: await slimPostgis(cacheDir) },
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
