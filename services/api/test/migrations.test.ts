import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { MIGRATIONS_DIR, migrate, MigrationError, pendingMigrations, readMigrations } from '../src/db/migrate.js';
import { withTransaction } from '../src/db/pool.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ migrate: false });
});
afterAll(async () => {
  await db?.close();
});

const repoRoot = join(import.meta.dirname, '../../..');

/** `npm run migrate` as a real process against the test database. */
function runMigrateCli(databaseUrl: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'services/api/src/db/migrate-cli.ts'], {
      cwd: repoRoot,
      env: { ...process.env, DATABASE_URL: databaseUrl, LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    child.on('exit', (code) => resolve({ code, output }));
  });
}

async function schemaNames(): Promise<string[]> {
  const { rows } = await db.pool.query<{ nspname: string }>(
    "SELECT nspname FROM pg_namespace WHERE nspname IN ('features', 'metadata', 'history', 'qc', 'users') ORDER BY nspname",
  );
  return rows.map((r) => r.nspname);
}

describe('migrations', () => {
  it('two processes migrating an empty database at once both succeed and apply each file once', async () => {
    await db.reset({ migrate: false });
    expect(await schemaNames()).toEqual([]);
    const [a, b] = await Promise.all([runMigrateCli(db.url), runMigrateCli(db.url)]);
    expect(a.code, a.output).toBe(0);
    expect(b.code, b.output).toBe(0);
    expect(await schemaNames()).toEqual(['features', 'history', 'metadata', 'qc', 'users']);
    const { rows } = await db.pool.query<{ name: string }>('SELECT name FROM metadata.schema_migrations ORDER BY name');
    expect(rows.map((r) => r.name)).toEqual(readMigrations().map((m) => m.name));
    // Exactly one of them applied 001; the other found it done. (The lock is taken per file, so the
    // two may share the later files between them — each file is still applied exactly once, above.)
    const applied = [a.output, b.output].filter((o) => o.includes('"migration":"001'));
    expect(applied).toHaveLength(1);
    expect(await pendingMigrations(db.pool)).toEqual([]);
    // The job queue's own schema comes with it, so QC submits work on a database prepared this way.
    const queue = await db.pool.query("SELECT 1 FROM pg_namespace WHERE nspname = 'graphile_worker'");
    expect(queue.rowCount).toBe(1);
  });

  it('migrating again is a no-op', async () => {
    const before = await db.pool.query('SELECT name, applied_at FROM metadata.schema_migrations ORDER BY name');
    expect(await migrate(db.pool)).toEqual([]);
    expect(await migrate(db.pool)).toEqual([]);
    const after = await db.pool.query('SELECT name, applied_at FROM metadata.schema_migrations ORDER BY name');
    expect(after.rows).toEqual(before.rows);
  });

  it('refuses to run when an applied migration file was changed afterwards', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'migrations-'));
    try {
      for (const m of readMigrations(MIGRATIONS_DIR)) writeFileSync(join(dir, m.name), `${m.sql}\n-- edited later\n`);
      await expect(migrate(db.pool, { dir })).rejects.toThrow(MigrationError);
      await expect(migrate(db.pool, { dir })).rejects.toThrow(/was changed after it was applied/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rolls back a failing migration completely, recording nothing', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'migrations-'));
    try {
      for (const m of readMigrations(MIGRATIONS_DIR)) writeFileSync(join(dir, m.name), m.sql);
      writeFileSync(join(dir, '999_broken.sql'), 'CREATE TABLE qc.half_done (id int);\nSELECT no_such_function();');
      await expect(migrate(db.pool, { dir })).rejects.toThrow(/999_broken\.sql failed/);
      const table = await db.pool.query("SELECT to_regclass('qc.half_done') AS t");
      expect(table.rows[0].t).toBeNull();
      expect(await pendingMigrations(db.pool, ['999_broken.sql'])).toEqual(['999_broken.sql']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the features table and its triggers', () => {
  const point = `ST_SetSRID(ST_MakePoint(13.4, 52.5), 4326)`;

  it('records direct SQL edits with the database user as actor and bumps the version', async () => {
    const user = (await db.pool.query<{ u: string }>('SELECT session_user AS u')).rows[0]!.u;
    const inserted = await db.pool.query<{ id: string; version: number }>(
      `INSERT INTO features.features (name, kategorie, geom) VALUES ('direkt', 'denkmal', ${point}) RETURNING id, version`,
    );
    const { id, version } = inserted.rows[0]!;
    expect(typeof id).toBe('string');
    expect(version).toBe(1);
    // A writer that sets its own version is overruled: the trigger keeps versions consecutive.
    await db.pool.query(`UPDATE features.features SET name = 'per WFS-T', version = 99 WHERE id = $1`, [id]);
    const row = await db.pool.query('SELECT version, status, created_by, updated_by FROM features.features WHERE id = $1', [id]);
    expect(row.rows[0]).toEqual({ version: 2, status: 'draft', created_by: user, updated_by: user });

    const history = await db.pool.query(
      'SELECT version, operation, actor, snapshot FROM history.feature_versions WHERE feature_id = $1 ORDER BY id',
      [id],
    );
    expect(history.rows.map((r) => [r.version, r.operation, r.actor])).toEqual([
      [1, 'insert', user],
      [2, 'update', user],
    ]);
    expect(history.rows[1].snapshot).toMatchObject({ id, name: 'per WFS-T', kategorie: 'denkmal', version: 2, geometry: { type: 'Point', coordinates: [13.4, 52.5] } });
  });

  it('records the actor a transaction sets, and only for that transaction', async () => {
    const id = await withTransaction(
      db.pool,
      async (client) => {
        const { rows } = await client.query<{ id: string }>(`INSERT INTO features.features (name, kategorie, geom) VALUES ('mit Akteur', 'friedhof', ${point}) RETURNING id`);
        return rows[0]!.id;
      },
      { actor: 'carol' },
    );
    await db.pool.query(`UPDATE features.features SET name = 'ohne Akteur' WHERE id = $1`, [id]);
    const { rows } = await db.pool.query('SELECT operation, actor FROM history.feature_versions WHERE feature_id = $1 ORDER BY id', [id]);
    const user = (await db.pool.query<{ u: string }>('SELECT session_user AS u')).rows[0]!.u;
    expect(rows).toEqual([
      { operation: 'insert', actor: 'carol' },
      { operation: 'update', actor: user },
    ]);
  });

  it('keeps the history of a deleted feature, ending with a delete row holding the last state', async () => {
    const { rows } = await db.pool.query<{ id: string }>(`INSERT INTO features.features (name, kategorie, geom) VALUES ('weg', 'blumenbeet', ${point}) RETURNING id`);
    const id = rows[0]!.id;
    await db.pool.query('DELETE FROM features.features WHERE id = $1', [id]);
    const history = await db.pool.query('SELECT operation, snapshot FROM history.feature_versions WHERE feature_id = $1 ORDER BY id', [id]);
    expect(history.rows.map((r) => r.operation)).toEqual(['insert', 'delete']);
    expect(history.rows[1].snapshot).toMatchObject({ name: 'weg', kategorie: 'blumenbeet' });
  });

  it('rejects a kategorie outside the three kinds and a geometry in another SRID', async () => {
    await expect(db.pool.query(`INSERT INTO features.features (name, kategorie, geom) VALUES ('x', 'parkplatz', ${point})`)).rejects.toMatchObject({ code: '23514' });
    await expect(db.pool.query(`INSERT INTO features.features (name, kategorie, geom) VALUES ('x', 'denkmal', ST_SetSRID(ST_MakePoint(1, 2), 3857))`)).rejects.toThrow(/SRID/i);
  });

  it('has a spatial index on geom', async () => {
    const { rows } = await db.pool.query(`SELECT indexdef FROM pg_indexes WHERE schemaname = 'features' AND tablename = 'features'`);
    expect(rows.map((r) => r.indexdef).join('\n')).toMatch(/USING gist \(geom\)/);
  });
});
