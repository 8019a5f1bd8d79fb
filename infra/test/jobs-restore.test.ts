/**
 * The restore as docs/infra.md documents it, run as written, on real PostgreSQL: the commands are read
 * from the docs' "Backups and restore" and "Backups off the host" sections, and what runs inside the
 * backup container (`/jobs/restore.sh …`) runs here with the container's environment (its
 * BACKUP_DIR, BACKUP_DATABASES with the test server's address, PGPASSWORD_FEATURES).
 *
 * The database is the stack's: PostGIS, the roles job, the API's migrations as `features`. Then the
 * chain an operator goes through after losing the host: backup.sh's dump, backup-offsite.sh's
 * encrypted copy (rclone, with a local directory standing in for the bucket), the host's dumps gone,
 * the fetch from the bucket, and the documented restore. Owners and grants must come back as dumped
 * (no --no-owner, the live database, not a fresh one).
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { binary, lacks, requirements } from '../../test/helpers/requirements.js';

const ADMIN_URL = process.env.TEST_DATABASE_URL;
const MISSING = lacks(
  'the documented restore on PostgreSQL',
  requirements.postgres('a PostgreSQL + PostGIS server'),
  binary('pg_dump', 'apt-get install postgresql-client'),
  binary('pg_restore', 'apt-get install postgresql-client'),
  binary('psql', 'apt-get install postgresql-client'),
  binary('rclone'),
);

const REPO = join(import.meta.dirname, '..', '..');
const JOBS = join(import.meta.dirname, '..', 'jobs');
const DB = `fp_restore_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
const PASSPHRASE = 'restore-drill-passphrase-0123456789';

/** The shell lines of docs/infra.md's backup sections that run a job script in a container. */
function documentedCommands(): { restore: string[]; fetch: string[] } {
  const doc = readFileSync(join(REPO, 'docs', 'infra.md'), 'utf8');
  const start = doc.indexOf('### Backups and restore');
  const end = doc.indexOf('\n### ', doc.indexOf('### Backups off the host'));
  if (start < 0 || end < 0) throw new Error('docs/infra.md has no "Backups and restore" / "Backups off the host" sections');
  const lines = doc.slice(start, end).split('\n').map((l) => l.replace(/\s+#.*$/, '').trim());
  const inContainer = (container: string, script: string) =>
    lines.filter((l) => l.startsWith(`docker exec ${container} ${script} `)).map((l) => l.slice(`docker exec ${container} `.length));
  return { restore: inContainer('geodata-backup', '/jobs/restore.sh'), fetch: inContainer('geodata-backup-offsite', '/jobs/backup-offsite.sh fetch') };
}

const admin = () => new URL(ADMIN_URL ?? 'postgres://localhost/');
const urlAs = (user: string, database = DB) => {
  const url = admin();
  url.username = user;
  if (user !== admin().username) url.password = `${user}-test-pw`;
  url.pathname = `/${database}`;
  return url.toString();
};

let dir: string;
let backupDir: string;
let bucket: string;
let adminClient: pg.Client;
let owner: pg.Pool;

/** The backup container's environment, as infra/stack/backups.ts declares it, addressed to the test server. */
const backupEnv = () => ({
  PATH: process.env.PATH ?? '',
  BACKUP_DIR: backupDir,
  BACKUP_DATABASES: `features=${admin().hostname}:${admin().port || '5432'}:${DB}:${decodeURIComponent(admin().username) || 'postgres'}`,
  // Any value: the test server trusts loopback; the script refuses to run without one.
  PGPASSWORD_FEATURES: decodeURIComponent(admin().password) || 'unused-with-trust-auth',
});

/** The off-host copy container's environment, with a local directory as the "bucket". */
const offsiteEnv = () => ({
  PATH: process.env.PATH ?? '',
  HOME: dir,
  BACKUP_DIR: backupDir,
  BACKUP_OFFSITE_STATE_DIR: join(dir, 'state'),
  BACKUP_OFFSITE_TARGET: `offsite:${bucket}`,
  BACKUP_OFFSITE_PASSPHRASE: PASSPHRASE,
  RCLONE_CONFIG_OFFSITE_TYPE: 'local',
});

function sh(script: string, args: string[], env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile('/bin/sh', [script, ...args], { env, encoding: 'buffer', maxBuffer: 256 * 1024 * 1024, timeout: 120_000 }, (error, stdout, stderr) =>
      resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout: stdout.toString('latin1'), stderr: stderr.toString('utf8') }),
    );
  });
}

/** A documented `/jobs/<script> args…` line, run with the repository's script. */
function runDocumented(line: string, env: Record<string, string>) {
  const [script, ...args] = line.split(/\s+/);
  expect(script?.startsWith('/jobs/')).toBe(true);
  return sh(join(JOBS, script!.slice('/jobs/'.length)), args, env);
}

async function state() {
  const features = await owner.query<{ id: string; name: string }>('SELECT id, name FROM features.features ORDER BY id');
  const owners = await owner.query<{ owner: string }>(`SELECT DISTINCT tableowner AS owner FROM pg_tables WHERE schemaname IN ('features', 'history', 'qc', 'users', 'metadata')`);
  const grants = await owner.query<{ grant: string }>(`
    SELECT table_schema || '.' || table_name || ' ' || string_agg(privilege_type, ',' ORDER BY privilege_type) AS grant
      FROM information_schema.role_table_grants WHERE grantee = 'geoserver' GROUP BY table_schema, table_name ORDER BY 1`);
  const history = await owner.query<{ n: number }>('SELECT count(*)::int AS n FROM history.feature_versions');
  return { features: features.rows, owners: owners.rows.map((r) => r.owner), grants: grants.rows.map((r) => r.grant), history: history.rows[0]?.n };
}

beforeAll(async () => {
  if (MISSING) return;
  dir = mkdtempSync(join(tmpdir(), 'restore-drill-'));
  backupDir = join(dir, 'backups');
  bucket = join(dir, 'bucket');
  mkdirSync(backupDir);
  mkdirSync(bucket);
  adminClient = new pg.Client({ connectionString: ADMIN_URL });
  await adminClient.connect();
  await adminClient.query(`CREATE DATABASE ${pg.escapeIdentifier(DB)}`);
  const inDb = new pg.Client({ connectionString: urlAs(decodeURIComponent(admin().username) || 'postgres') });
  await inDb.connect();
  await inDb.query('CREATE EXTENSION IF NOT EXISTS postgis');
  await inDb.end();
  const roles = await sh(join(JOBS, 'features-db-roles.sh'), [], {
    PATH: process.env.PATH ?? '',
    PGHOST: admin().hostname,
    PGPORT: admin().port || '5432',
    PGUSER: decodeURIComponent(admin().username) || 'postgres',
    PGPASSWORD: decodeURIComponent(admin().password),
    PGDATABASE: DB,
    FEATURES_DB_PASSWORD: 'features-test-pw',
    GEOSERVER_DB_PASSWORD: 'geoserver-test-pw',
  });
  if (roles.code !== 0) throw new Error(`features-db-roles.sh: ${roles.stderr}`);
  owner = new pg.Pool({ connectionString: urlAs('features'), max: 2 });
  owner.on('error', () => undefined); // DROP DATABASE … WITH (FORCE) at the end ends open connections
  // The api-migrate job: the API's migration command as `features`.
  const migrated = await new Promise<{ code: number; output: string }>((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', 'services/api/src/db/migrate-cli.ts'], { cwd: REPO, env: { PATH: process.env.PATH ?? '', NODE_ENV: 'production', DATABASE_URL: urlAs('features'), LOG_LEVEL: 'warn' }, timeout: 120_000 }, (error, stdout, stderr) =>
      resolve({ code: error ? 1 : 0, output: `${stdout}${stderr}` }),
    );
  });
  if (migrated.code !== 0) throw new Error(`the API's migrations failed: ${migrated.output}`);
  await owner.query(`INSERT INTO features.features (id, name, kategorie, geom) VALUES
    ('a', 'Alter Friedhof', 'friedhof', ST_GeomFromText('POINT(13.4 52.5)', 4326)),
    ('b', 'Rosenbeet', 'blumenbeet', ST_GeomFromText('POINT(13.5 52.5)', 4326))`);
}, 120_000);

afterAll(async () => {
  if (MISSING) return;
  await owner?.end().catch(() => undefined);
  await adminClient.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(DB)} WITH (FORCE)`).catch(() => undefined);
  await adminClient.end();
  rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(MISSING)('the documented restore', () => {
  it('docs/infra.md gives the restore of the newest dump and of a fetched one', () => {
    const { restore, fetch } = documentedCommands();
    expect(restore).toContain('/jobs/restore.sh features latest');
    expect(restore).toContain('/jobs/restore.sh features features-<stamp>.dump');
    expect(fetch).toEqual(['/jobs/backup-offsite.sh fetch features/features-<stamp>.dump > features-<stamp>.dump']);
  });

  it('brings back the dumped data, owners and grants after the host lost its dumps (dump, encrypted off-host copy, fetch, restore)', async () => {
    const dumped = await state();
    expect(dumped.owners).toEqual(['features']);
    expect(dumped.features.map((f) => f.id)).toEqual(['a', 'b']);

    const backup = await sh(join(JOBS, 'backup.sh'), [], { ...backupEnv(), BACKUP_ONCE: '1' });
    expect(backup.code, backup.stdout + backup.stderr).toBe(0);
    const [dump] = readdirSync(join(backupDir, 'features'));
    expect(dump).toMatch(/^features-\d{8}T\d{6}Z\.dump$/);
    const copy = await sh(join(JOBS, 'backup-offsite.sh'), ['once'], offsiteEnv());
    expect(copy.code, copy.stderr).toBe(0);
    // Encrypted: neither the file name nor the dump's contents are readable in the bucket.
    const stored = readdirSync(bucket, { recursive: true, withFileTypes: true }).filter((e) => e.isFile());
    expect(stored).toHaveLength(1);
    expect(stored[0]?.name).not.toContain('features');
    expect(readFileSync(join(stored[0]!.parentPath, stored[0]!.name)).includes(Buffer.from('Alter Friedhof'))).toBe(false);

    // After the dump: a new feature, a deleted one, a revoked grant; then the host loses its dumps.
    await owner.query(`INSERT INTO features.features (id, name, kategorie, geom) VALUES ('c', 'Nach dem Dump', 'denkmal', ST_GeomFromText('POINT(13.6 52.5)', 4326))`);
    await owner.query(`DELETE FROM features.features WHERE id = 'a'`);
    await owner.query('REVOKE ALL ON features.features FROM geoserver');
    rmSync(join(backupDir, 'features'), { recursive: true });

    // The documented fetch (its output redirected into the dump's file), then the documented restore.
    const { restore, fetch } = documentedCommands();
    const fetchLine = fetch[0]!.replaceAll('<stamp>', dump!.slice('features-'.length, -'.dump'.length));
    const [command, redirect] = fetchLine.split(' > ');
    const fetched = await runDocumented(command!, offsiteEnv());
    expect(fetched.code, fetched.stderr).toBe(0);
    mkdirSync(join(backupDir, 'features'));
    writeFileSync(join(backupDir, 'features', redirect!), Buffer.from(fetched.stdout, 'latin1'));
    const named = restore.find((l) => l.includes('<stamp>'))!.replaceAll('<stamp>', dump!.slice('features-'.length, -'.dump'.length));
    const restored = await runDocumented(named, backupEnv());
    expect(restored.code, restored.stderr).toBe(0);

    expect(await state()).toEqual(dumped);
    // The API's role works on what came back: it writes, and the history trigger still records.
    await owner.query(`UPDATE features.features SET name = 'Alter Friedhof Süd' WHERE id = 'a'`);
    expect((await owner.query<{ n: number }>(`SELECT count(*)::int AS n FROM history.feature_versions WHERE feature_id = 'a'`)).rows[0]?.n).toBe(2);
  });

  it('restores the newest dump with `latest`; a restore failing half-way leaves the database as it was', async () => {
    const { restore } = documentedCommands();
    const latest = restore.find((l) => l.endsWith(' latest'))!;
    // A newer dump that cannot be restored past its middle: a table owned by a role that is gone by
    // the time of the restore (the restore drops and recreates everything, then fails on the owner).
    const gone = `fp_gone_${process.pid}`;
    const inDb = new pg.Client({ connectionString: urlAs(decodeURIComponent(admin().username) || 'postgres') });
    await inDb.connect();
    try {
      await inDb.query(`CREATE ROLE ${gone}`);
      await inDb.query(`CREATE TABLE features.extra (x int); ALTER TABLE features.extra OWNER TO ${gone}`);
      const [good] = readdirSync(join(backupDir, 'features'));
      const backup = await sh(join(JOBS, 'backup.sh'), [], { ...backupEnv(), BACKUP_ONCE: '1' });
      expect(backup.code, backup.stderr).toBe(0);
      const newer = readdirSync(join(backupDir, 'features')).find((f) => f !== good)!;
      renameSync(join(backupDir, 'features', newer), join(backupDir, 'features', 'features-29991231T235959Z.dump'));
      await inDb.query(`DROP TABLE features.extra; DROP ROLE ${gone}`);
      await owner.query(`INSERT INTO features.features (id, name, kategorie, geom) VALUES ('d', 'Vor dem Fehlschlag', 'denkmal', ST_GeomFromText('POINT(13.7 52.5)', 4326))`);
      const before = await state();

      const failed = await runDocumented(latest, backupEnv());
      expect(failed.code).toBe(1);
      expect(failed.stderr).toContain(`role "${gone}" does not exist`);
      expect(failed.stderr).toContain('unchanged');
      expect(await state()).toEqual(before);

      rmSync(join(backupDir, 'features', 'features-29991231T235959Z.dump'));
      const restored = await runDocumented(latest, backupEnv());
      expect(restored.code, restored.stderr).toBe(0);
      expect((await state()).features).toEqual([{ id: 'a', name: 'Alter Friedhof' }, { id: 'b', name: 'Rosenbeet' }]);
    } finally {
      await inDb.query(`DROP TABLE IF EXISTS features.extra; DROP ROLE IF EXISTS ${gone}`).catch(() => undefined);
      await inDb.end();
    }
  });

  it('refuses an unknown database or dump with exit 2', async () => {
    expect((await sh(join(JOBS, 'restore.sh'), ['nosuchdb', 'latest'], backupEnv())).code).toBe(2);
    expect((await sh(join(JOBS, 'restore.sh'), ['features', '../../etc/passwd'], backupEnv())).code).toBe(2);
    expect((await sh(join(JOBS, 'restore.sh'), ['features', 'features-20000101T000000Z.dump'], backupEnv())).code).toBe(2);
  });
});
