import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { postgis } from '@electric-sql/pglite-postgis';
import type { Logger } from 'pino';
import { servePGlite } from './pglite-server.js';

/**
 * The embedded development database: PGlite (PostgreSQL compiled to WebAssembly) with PostGIS,
 * served over TCP on 127.0.0.1 so the API reaches it through `pg` with a plain connection string,
 * exactly as it reaches a real PostgreSQL. Used when DATABASE_URL is unset.
 */
export interface EmbeddedDatabase {
  /** postgres://… connection string for `pg`. */
  url: string;
  close(): Promise<void>;
}

export interface EmbeddedDatabaseOptions {
  /** Folder of the persistent database; undefined keeps it in memory (tests). */
  dataDir?: string;
  port?: number;
  logger?: Logger;
}

export async function startEmbeddedDatabase(options: EmbeddedDatabaseOptions = {}): Promise<EmbeddedDatabase> {
  const release = options.dataDir ? lockDataDir(options.dataDir) : () => undefined;
  try {
    const started = performance.now();
    const db = await PGlite.create({ ...(options.dataDir ? { dataDir: options.dataDir } : {}), extensions: { postgis } });
    const server = await servePGlite(db, { port: options.port ?? 0 });
    options.logger?.info(
      { dataDir: options.dataDir ?? '(memory)', port: server.port, ms: Math.round(performance.now() - started) },
      'embedded database ready',
    );
    return {
      url: `postgres://postgres@${server.host}:${server.port}/postgres`,
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
