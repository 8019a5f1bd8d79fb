import { cpSync, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbeddedDatabase, type EmbeddedDatabase } from '../src/db/embedded.js';
import { apiSchema, chooseImage, engineKey } from '../src/db/embedded-image.js';
import { MIGRATIONS_DIR, migrate, readMigrations } from '../src/db/migrate.js';
import { migrateQueue } from '../src/qc/queue.js';

/**
 * A fresh data folder under the embedded database starts from a cached image (initdb, PostGIS and the
 * migrations done once). Whatever the cache holds — nothing, the current image or an older one — the
 * start ends with the same correct, fully migrated database: every table, PostGIS, the migration
 * ledger with the right checksums, and graphile-worker's schema.
 *
 * Each test starts the database as boot.ts does (startEmbeddedDatabase with the API's schema, then
 * both migration runs, then saveImage) with a cache folder of its own.
 */
let scratch: string;
let cacheDir: string;

beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), 'embedded-image-'));
  cacheDir = join(scratch, 'cache');
});
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** A migrations folder: the real files plus `extra` (name → SQL). */
function migrationsWith(extra: Record<string, string>): string {
  const dir = mkdtempSync(join(scratch, 'migrations-'));
  cpSync(MIGRATIONS_DIR, dir, { recursive: true });
  for (const [name, sql] of Object.entries(extra)) writeFileSync(join(dir, name), sql);
  return dir;
}

/** What boot.ts does with a data folder; returns the database (still open) and what migrate applied. */
async function bootDatabase(dataDir: string, migrationsDir = MIGRATIONS_DIR): Promise<{ embedded: EmbeddedDatabase; pool: pg.Pool; applied: string[] }> {
  const embedded = await startEmbeddedDatabase({ dataDir, image: { schema: apiSchema(migrationsDir), cacheDir } });
  const pool = new pg.Pool({ connectionString: embedded.url, max: 2 });
  const applied = await migrate(pool, { dir: migrationsDir });
  await migrateQueue(pool);
  await embedded.saveImage();
  return { embedded, pool, applied };
}

/** The database is complete: what every start must end with, whatever it started from. */
async function expectFullyMigrated(pool: pg.Pool, migrationsDir = MIGRATIONS_DIR): Promise<void> {
  const ledger = await pool.query<{ name: string; checksum: string }>('SELECT name, checksum FROM metadata.schema_migrations ORDER BY name');
  expect(ledger.rows).toEqual(readMigrations(migrationsDir).map((m) => ({ name: m.name, checksum: m.checksum })));
  const postgis = await pool.query<{ version: string; point: string }>("SELECT postgis_lib_version() AS version, ST_AsText(ST_Transform(ST_SetSRID(ST_MakePoint(13.4, 52.5), 4326), 25833)) AS point");
  expect(postgis.rows[0]!.version).toMatch(/^3\.\d+\.\d+/);
  expect(postgis.rows[0]!.point).toMatch(/^POINT\(39\d{4}\.\d+ 58\d{5}\.\d+\)$/);
  const tables = await pool.query<{ name: string }>(
    "SELECT table_schema || '.' || table_name AS name FROM information_schema.tables WHERE table_schema IN ('features', 'history', 'qc', 'graphile_worker') ORDER BY 1",
  );
  const names = tables.rows.map((r) => r.name);
  expect(names).toEqual(expect.arrayContaining(['features.features', 'history.feature_versions', 'graphile_worker._private_jobs']));
  // The schema works, not only exists: a write goes through the triggers into history.
  const inserted = await pool.query<{ id: string }>("INSERT INTO features.features (name, kategorie, geom) VALUES ('Probe', 'denkmal', ST_SetSRID(ST_MakePoint(13.4, 52.5), 4326)) RETURNING id");
  const history = await pool.query('SELECT operation FROM history.feature_versions WHERE feature_id = $1::text', [inserted.rows[0]!.id]);
  expect(history.rows).toEqual([{ operation: 'insert' }]);
}

async function stop(database: { embedded: EmbeddedDatabase; pool: pg.Pool }): Promise<void> {
  await database.pool.end();
  await database.embedded.close();
}

/** The images in the cache: folders with a manifest (the unpacked PostGIS files live there too). */
const images = (): string[] => (existsSync(join(cacheDir, engineKey())) ? readdirSync(join(cacheDir, engineKey())).filter((name) => existsSync(join(cacheDir, engineKey(), name, 'image.json'))) : []);

describe('the embedded database image', () => {
  it('a fresh folder with no image is created by initdb, fully migrated, and becomes the image', async () => {
    const database = await bootDatabase(join(scratch, 'first'));
    try {
      expect(database.embedded.origin).toBe('initdb');
      expect(database.applied).toEqual(readMigrations().map((m) => m.name));
      await expectFullyMigrated(database.pool);
    } finally {
      await stop(database);
    }
    expect(images()).toHaveLength(1);
    expect(chooseImage(cacheDir, apiSchema())?.current).toBe(true);
  }, 600_000);

  it('a fresh folder restored from the current image needs no migration and holds none of the data written after the image was made', async () => {
    const database = await bootDatabase(join(scratch, 'second'));
    try {
      expect(database.embedded.origin).toBe('image');
      expect(database.applied).toEqual([]);
      const probes = await database.pool.query("SELECT 1 FROM features.features WHERE name = 'Probe'");
      expect(probes.rowCount).toBe(0); // the first test's row was written after its image was saved
      await expectFullyMigrated(database.pool);
    } finally {
      await stop(database);
    }
  }, 300_000);

  it('a fresh folder restored from a stale image applies only the newer migrations, and leaves an image of the new schema', async () => {
    const dir = migrationsWith({ '099_start_probe.sql': 'CREATE TABLE metadata.start_probe (id integer PRIMARY KEY);' });
    const database = await bootDatabase(join(scratch, 'third'), dir);
    try {
      expect(database.embedded.origin).toBe('stale-image');
      expect(database.applied).toEqual(['099_start_probe.sql']);
      await expectFullyMigrated(database.pool, dir);
      expect((await database.pool.query("SELECT to_regclass('metadata.start_probe') IS NOT NULL AS present")).rows[0]).toEqual({ present: true });
    } finally {
      await stop(database);
    }
    expect(images()).toHaveLength(2);
    expect(chooseImage(cacheDir, apiSchema(dir))?.current).toBe(true);
  }, 300_000);

  it('an image holding a migration whose file has changed since is never used', () => {
    const schema = { ...apiSchema(), [readMigrations()[0]!.name]: 'a different checksum' };
    expect(chooseImage(cacheDir, schema)).toBeUndefined();
    // Nor is one whose graphile-worker schema came from another version.
    expect(chooseImage(cacheDir, { ...apiSchema(), 'graphile-worker': '0.0.0' })).toBeUndefined();
  });

  it('an existing folder is opened as it is', async () => {
    const database = await bootDatabase(join(scratch, 'second'));
    try {
      expect(database.embedded.origin).toBe('existing');
      expect(database.applied).toEqual([]);
      expect((await database.pool.query("SELECT 1 FROM features.features WHERE name = 'Probe'")).rowCount).toBe(1);
      // PostGIS is loaded on first use from the unpacked files (lazyPostgis), PROJ's data included.
      const point = await database.pool.query<{ point: string }>("SELECT ST_AsText(ST_Transform(ST_SetSRID(ST_MakePoint(13.4, 52.5), 4326), 25833)) AS point");
      expect(point.rows[0]!.point).toMatch(/^POINT\(39\d{4}\.\d+ 58\d{5}\.\d+\)$/);
    } finally {
      await stop(database);
    }
  }, 300_000);

  it('in a thread of its own (as npm start runs it) creates and migrates a folder, answers PostGIS queries and releases the folder on close', async () => {
    // The thread's module is TypeScript here: a small entry registers tsx in the thread first.
    const entry = join(scratch, 'thread-entry.mjs');
    const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx/esm/api').replace(/\.cjs$/, '.mjs')).href;
    writeFileSync(entry, `import { register } from ${JSON.stringify(tsx)};\nregister();\nawait import(${JSON.stringify(new URL('../src/db/embedded-thread.ts', import.meta.url).href)});\n`);
    const dataDir = join(scratch, 'thread');
    const embedded = await startEmbeddedDatabase({ dataDir, image: { schema: apiSchema(), cacheDir }, thread: entry });
    const pool = new pg.Pool({ connectionString: embedded.url, max: 2 });
    try {
      expect(['image', 'initdb']).toContain(embedded.origin);
      expect(existsSync(join(scratch, 'thread.pid'))).toBe(true);
      await migrate(pool);
      await migrateQueue(pool);
      await embedded.saveImage();
      await expectFullyMigrated(pool);
    } finally {
      await pool.end();
      await embedded.close();
    }
    expect(existsSync(join(scratch, 'thread.pid'))).toBe(false);
    expect(chooseImage(cacheDir, apiSchema())?.current).toBe(true);
    // Closed for good: the folder opens again, as it was left.
    const again = await startEmbeddedDatabase({ dataDir });
    const check = new pg.Pool({ connectionString: again.url, max: 1 });
    try {
      expect(again.origin).toBe('existing');
      expect((await check.query("SELECT 1 FROM features.features WHERE name = 'Probe'")).rowCount).toBe(1);
    } finally {
      await check.end();
      await again.close();
    }
  }, 600_000);
});
