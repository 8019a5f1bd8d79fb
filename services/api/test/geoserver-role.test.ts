/**
 * GeoServer's database role holds what WFS-T needs and nothing more: it reads, inserts, updates and
 * deletes feature rows, and the triggers write the history (and the QC and tile rows an edit implies)
 * on its behalf, but it cannot write users, QC, the job queue, the migrations record or the history
 * itself (a forged history row would name any actor).
 *
 * The database as the stack builds it, on real PostgreSQL: a fresh database with PostGIS (as the
 * postgis image creates it), the roles job (infra/jobs/features-db-roles.sh), the API's migrations as
 * the role `features` (the api-migrate job), graphile-worker's schema as `features` (the API's worker
 * at start), then a login as `geoserver`.
 */
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate, MIGRATIONS_DIR } from '../src/db/migrate.js';
import { migrateQueue } from '../src/qc/queue.js';
import { binary, lacks, requirements } from '../../../test/helpers/requirements.js';

const ADMIN_URL = process.env.TEST_DATABASE_URL;
const MISSING = lacks(
  "GeoServer's database role tests",
  requirements.postgres('a PostgreSQL + PostGIS server; the roles are cluster-wide'),
  binary('psql', 'apt-get install postgresql-client'),
);

const REPO = join(import.meta.dirname, '..', '..', '..');
const DB_NAME = `fp_gsrole_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
/** The migration that narrows GeoServer's rights; the older stack below is migrated up to it first. */
const MIGRATION = '020_geoserver_least_privilege.sql';
const ALICE = '0b5e1c4a-7d8e-4f6a-9b2c-3d4e5f6a7b8c';
const ALICE_SETTING = `u_${ALICE.replaceAll('-', '')}`;

const urlAs = (user: string, database = DB_NAME) => {
  const url = new URL(ADMIN_URL ?? 'postgres://localhost/');
  url.username = user;
  url.password = user === 'postgres' ? url.password : `${user}-test-pw`;
  url.pathname = `/${database}`;
  return url.toString();
};

/** The roles job, as the stack runs it (superuser, the database's name, both passwords). */
function rolesJob(database = DB_NAME): Promise<{ code: number; stderr: string }> {
  const admin = new URL(ADMIN_URL ?? 'postgres://localhost/');
  return new Promise((resolve) => {
    execFile('/bin/sh', [join(REPO, 'infra/jobs/features-db-roles.sh')], {
      env: {
        PATH: process.env.PATH ?? '',
        PGHOST: admin.hostname,
        PGPORT: admin.port || '5432',
        PGUSER: decodeURIComponent(admin.username),
        PGPASSWORD: decodeURIComponent(admin.password),
        PGDATABASE: database,
        FEATURES_DB_PASSWORD: 'features-test-pw',
        GEOSERVER_DB_PASSWORD: 'geoserver-test-pw',
      },
      encoding: 'utf8',
      timeout: 60_000,
    }, (error, _stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stderr }));
  });
}

/** Table rights of `geoserver`, as `table PRIVILEGES` lines. */
async function geoserverGrants(pool: pg.Pool): Promise<string[]> {
  const { rows } = await pool.query<{ grant: string }>(`
    SELECT table_schema || '.' || table_name || ' ' || string_agg(privilege_type, ',' ORDER BY privilege_type) AS grant
      FROM information_schema.role_table_grants
     WHERE grantee = 'geoserver'
     GROUP BY table_schema, table_name
     ORDER BY 1`);
  return rows.map((r) => r.grant);
}

const GEOSERVER_GRANTS = ['features.features DELETE,INSERT,SELECT,UPDATE', 'features.public_features SELECT'];

let admin: pg.Client;
let owner: pg.Pool;
let geoserver: pg.Client;

/** One statement as `geoserver` in a transaction rolled back after, so a refusal leaves no trace. */
async function asGeoserver(sql: string, values: unknown[] = []): Promise<pg.QueryResult> {
  await geoserver.query('BEGIN');
  try {
    return await geoserver.query(sql, values);
  } finally {
    await geoserver.query('ROLLBACK');
  }
}

beforeAll(async () => {
  if (MISSING) return;
  admin = new pg.Client({ connectionString: urlAs('postgres', new URL(ADMIN_URL!).pathname.slice(1) || 'postgres') });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(DB_NAME)}`);
  const inDb = new pg.Client({ connectionString: urlAs('postgres') });
  await inDb.connect();
  await inDb.query('CREATE EXTENSION IF NOT EXISTS postgis');
  await inDb.end();

  const job = await rolesJob();
  if (job.code !== 0) throw new Error(`features-db-roles.sh failed: ${job.stderr}`);
  owner = new pg.Pool({ connectionString: urlAs('features'), max: 2 });
  // DROP DATABASE … WITH (FORCE) at the end ends whatever connection is still open; not a failure.
  owner.on('error', () => undefined);
  await migrate(owner);
  await migrateQueue(owner);
  // A feature the API wrote and a reviewer approved, and one in review with a claim on it.
  // (An insert is always a draft; the status follows as the QC transitions set it, a status-only update.)
  await owner.query(`INSERT INTO features.features (id, name, kategorie, geom) VALUES
    ('approved-1', 'Alter Friedhof', 'friedhof', ST_GeomFromText('POINT(13.4 52.5)', 4326)),
    ('in-qc-1', 'Rosenbeet', 'blumenbeet', ST_GeomFromText('POINT(13.5 52.5)', 4326))`);
  await owner.query(`UPDATE features.features SET status = CASE id WHEN 'approved-1' THEN 'approved' ELSE 'in_qc' END`);
  await owner.query(`INSERT INTO qc.claims (feature_id, holder, expires_at) VALUES ('in-qc-1', 'bob', now() + interval '1 hour')`);
  await owner.query(`INSERT INTO users.users (id, role) VALUES ('bob', 'reviewer')`);

  geoserver = new pg.Client({ connectionString: urlAs('geoserver') });
  geoserver.on('error', () => undefined);
  await geoserver.connect();
  // What GeoServer's store runs on taking a connection for a WFS-T user (infra/geoserver/provision.ts).
  await geoserver.query(`SET geodata.gs_user = '${ALICE_SETTING}'`);
}, 120_000);

afterAll(async () => {
  if (MISSING) return;
  await geoserver?.end().catch(() => undefined);
  await owner?.end().catch(() => undefined);
  await admin.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(DB_NAME)} WITH (FORCE)`).catch(() => undefined);
  await admin.end();
});

describe.skipIf(MISSING)("GeoServer's database role", () => {
  it('inserts, updates and deletes a feature as WFS-T does, and the history names the platform user', async () => {
    await geoserver.query('BEGIN');
    try {
      await geoserver.query(`INSERT INTO features.features (id, name, kategorie, geom) VALUES ('gs-1', 'Denkmal am Markt', 'denkmal', ST_GeomFromText('POINT(13.41 52.52)', 4326))`);
      await geoserver.query(`UPDATE features.features SET name = 'Denkmal am Alten Markt' WHERE id = 'gs-1'`);
      const read = await geoserver.query<{ name: string; version: number }>(`SELECT name, version FROM features.features WHERE id = 'gs-1'`);
      expect(read.rows).toEqual([{ name: 'Denkmal am Alten Markt', version: 2 }]);
      await geoserver.query(`DELETE FROM features.features WHERE id = 'gs-1'`);
      await geoserver.query('COMMIT');
    } catch (error) {
      await geoserver.query('ROLLBACK');
      throw error;
    }
    const { rows } = await owner.query<{ operation: string; actor: string; version: number }>(
      `SELECT operation, actor, version FROM history.feature_versions WHERE feature_id = 'gs-1' ORDER BY id`,
    );
    expect(rows).toEqual([
      { operation: 'insert', actor: ALICE, version: 1 },
      { operation: 'update', actor: ALICE, version: 2 },
      { operation: 'delete', actor: ALICE, version: 2 },
    ]);
    // The tile layer follows the table through its trigger, too.
    expect((await owner.query(`SELECT count(*)::int AS n FROM features.tile_features WHERE id = 'gs-1'`)).rows[0].n).toBe(0);
  });

  it('edits an approved feature (the edit reopens it in QC) and deletes one under review (its claim ends)', async () => {
    await geoserver.query('BEGIN');
    try {
      await geoserver.query(`UPDATE features.features SET name = 'Alter Friedhof Nord' WHERE id = 'approved-1'`);
      await geoserver.query(`DELETE FROM features.features WHERE id = 'in-qc-1'`);
      await geoserver.query('COMMIT');
    } catch (error) {
      await geoserver.query('ROLLBACK');
      throw error;
    }
    expect((await owner.query(`SELECT status FROM features.features WHERE id = 'approved-1'`)).rows).toEqual([{ status: 'draft' }]);
    const reopened = await owner.query(`SELECT action, actor FROM qc.transitions WHERE feature_id = 'approved-1'`);
    expect(reopened.rows).toEqual([{ action: 'reopen', actor: ALICE }]);
    expect((await owner.query(`SELECT count(*)::int AS n FROM qc.claims WHERE feature_id = 'in-qc-1'`)).rows[0].n).toBe(0);
    const tile = await owner.query(`SELECT name FROM features.tile_features WHERE id = 'approved-1'`);
    expect(tile.rows).toEqual([{ name: 'Alter Friedhof Nord' }]);
  });

  it('reads the feature table and the public view', async () => {
    expect((await asGeoserver('SELECT count(*)::int AS n FROM features.features')).rows[0].n).toBeGreaterThan(0);
    expect((await asGeoserver('SELECT id FROM features.public_features')).rows).toEqual(expect.any(Array));
  });

  const refused: [string, string][] = [
    ['users.users', `INSERT INTO users.users (id, role) VALUES ('mallory', 'admin')`],
    ['users.users', `UPDATE users.users SET role = 'admin'`],
    ['users.users', `DELETE FROM users.users`],
    ['qc.transitions', `INSERT INTO qc.transitions (feature_id, action, from_status, to_status, version, actor) VALUES ('approved-1', 'approve', 'in_qc', 'approved', 1, 'mallory')`],
    ['qc.transitions', `DELETE FROM qc.transitions`],
    ['qc.jobs', `DELETE FROM qc.jobs`],
    ['qc.jobs', `UPDATE qc.jobs SET status = 'queued'`],
    ['qc.job_outbox', `INSERT INTO qc.job_outbox (job_ids) VALUES ('{1}')`],
    ['qc.claims', `INSERT INTO qc.claims (feature_id, holder, expires_at) VALUES ('approved-1', 'mallory', now())`],
    ['qc.export_records', `DELETE FROM qc.export_records`],
    ['qc.osm_batches', `DELETE FROM qc.osm_batches`],
    ['graphile_worker.jobs', `SELECT graphile_worker.add_job('osm_export', '{}'::json)`],
    ['graphile_worker.jobs', `DELETE FROM graphile_worker.jobs`],
    ['graphile_worker._private_jobs', `DELETE FROM graphile_worker._private_jobs`],
    ['metadata.schema_migrations', `INSERT INTO metadata.schema_migrations (name, checksum) VALUES ('999_evil.sql', 'x')`],
    ['metadata.schema_migrations', `DELETE FROM metadata.schema_migrations`],
    ['metadata.category_mapping', `DELETE FROM metadata.category_mapping`],
    ['history.feature_versions', `INSERT INTO history.feature_versions (feature_id, version, operation, actor, snapshot) VALUES ('approved-1', 9, 'update', 'someone-else', '{}')`],
    ['history.feature_versions', `DELETE FROM history.feature_versions`],
    ['features.tile_features', `DELETE FROM features.tile_features`],
    ['http.idempotency_keys', `DELETE FROM http.idempotency_keys`],
  ];

  it.each(refused)('cannot write %s: %s', async (_table, sql) => {
    await expect(asGeoserver(sql)).rejects.toThrow(/permission denied/);
  });

  it('cannot change the schema', async () => {
    await expect(asGeoserver('CREATE TABLE features.evil (x int)')).rejects.toThrow(/permission denied/);
    await expect(asGeoserver('ALTER TABLE features.features DISABLE TRIGGER USER')).rejects.toThrow(/must be owner/);
  });

  it('keeps exactly these rights after the roles job runs again (a rotated password)', async () => {
    const again = await rolesJob();
    expect(again.code, again.stderr).toBe(0);
    expect(await geoserverGrants(owner)).toEqual(GEOSERVER_GRANTS);
    await expect(asGeoserver('DELETE FROM users.users')).rejects.toThrow(/permission denied/);
  });
});

describe.skipIf(MISSING)('a stack set up by the former roles job', () => {
  const OLD_DB = `${DB_NAME}_old`;
  let dir: string;
  let pool: pg.Pool;

  beforeAll(async () => {
    await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(OLD_DB)}`);
    const inDb = new pg.Client({ connectionString: urlAs('postgres', OLD_DB) });
    await inDb.connect();
    await inDb.query('CREATE EXTENSION IF NOT EXISTS postgis');
    await inDb.end();
    const job = await rolesJob(OLD_DB);
    if (job.code !== 0) throw new Error(`features-db-roles.sh failed: ${job.stderr}`);
    pool = new pg.Pool({ connectionString: urlAs('features', OLD_DB), max: 2 });
    pool.on('error', () => undefined);
    // What the former job left: every table `features` creates is GeoServer's to write.
    await pool.query('ALTER DEFAULT PRIVILEGES GRANT USAGE ON SCHEMAS TO geoserver');
    await pool.query('ALTER DEFAULT PRIVILEGES GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO geoserver');
    await pool.query('ALTER DEFAULT PRIVILEGES GRANT USAGE, SELECT ON SEQUENCES TO geoserver');
    dir = mkdtempSync(join(tmpdir(), 'gsrole-migrations-'));
    for (const file of readdirSync(MIGRATIONS_DIR).filter((f) => f < MIGRATION)) cpSync(join(MIGRATIONS_DIR, file), join(dir, file));
    await migrate(pool, { dir });
    await migrateQueue(pool);
    expect(await geoserverGrants(pool)).toContain('users.users DELETE,INSERT,SELECT,UPDATE');
  }, 120_000);

  afterAll(async () => {
    await pool?.end().catch(() => undefined);
    if (dir) rmSync(dir, { recursive: true, force: true });
    await admin.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(OLD_DB)} WITH (FORCE)`).catch(() => undefined);
  });

  it('keeps only the feature rights once the roles job and the migrations have run again', async () => {
    const job = await rolesJob(OLD_DB);
    expect(job.code, job.stderr).toBe(0);
    await migrate(pool);
    expect(await geoserverGrants(pool)).toEqual(GEOSERVER_GRANTS);
    // And a table created afterwards (graphile-worker's own upgrades, a new migration) is not GeoServer's.
    await pool.query('CREATE TABLE qc.later (id int)');
    expect(await geoserverGrants(pool)).toEqual(GEOSERVER_GRANTS);
  });
});
