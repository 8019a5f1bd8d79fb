import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * The shell jobs of the stack (features-db-roles.sh, identity-db-roles.sh, backup.sh) against a real
 * throwaway PostgreSQL 15 cluster with password authentication, started for this file: roles and
 * grants, idempotence, password rotation, a backup and its restore, retention.
 */

const PG_BIN = '/usr/lib/postgresql/15/bin';
const JOBS = join(import.meta.dirname, '..', 'jobs');
const SUPERUSER_PASSWORD = 'super-secret-pw';
const isRoot = process.getuid?.() === 0;
const available = existsSync(join(PG_BIN, 'initdb')) && existsSync(join(PG_BIN, 'psql'));
if (!available) console.log(`skipping the job scripts against PostgreSQL: no PostgreSQL 15 binaries in ${PG_BIN}`);

let dir: string;
let port: number;
const env = (extra: Record<string, string> = {}) => ({ PATH: `${PG_BIN}:${process.env.PATH ?? ''}`, PGHOST: '127.0.0.1', PGPORT: String(port), ...extra });
const asPostgres = (command: string, args: string[]) => (isRoot ? ['runuser', ['-u', 'postgres', '--', command, ...args]] : [command, args]) as [string, string[]];

function run(script: string, extra: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile('/bin/sh', [join(JOBS, script)], { env: env(extra), encoding: 'utf8', timeout: 60_000 }, (error, stdout, stderr) =>
      resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

function sql(query: string, options: { user?: string; password?: string; db?: string } = {}): string {
  return execFileSync(join(PG_BIN, 'psql'), ['-X', '-q', '-t', '-A', '-v', 'ON_ERROR_STOP=1', '-U', options.user ?? 'postgres', '-d', options.db ?? 'postgres', '-c', query], {
    env: env({ PGPASSWORD: options.password ?? SUPERUSER_PASSWORD }),
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  }).trim();
}

const canLogin = (user: string, password: string, db: string) => {
  try {
    sql('SELECT 1', { user, password, db });
    return true;
  } catch {
    return false;
  }
};

beforeAll(async () => {
  if (!available) return;
  dir = mkdtempSync(join(tmpdir(), 'infra-jobs-pg-'));
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  port = (server.address() as { port: number }).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  writeFileSync(join(dir, 'pw'), SUPERUSER_PASSWORD);
  if (isRoot) execFileSync('chown', ['-R', 'postgres:postgres', dir]);
  execFileSync(...asPostgres(join(PG_BIN, 'initdb'), ['-D', join(dir, 'data'), '-U', 'postgres', '--auth=scram-sha-256', `--pwfile=${join(dir, 'pw')}`, '-E', 'UTF8']), { stdio: 'ignore' });
  execFileSync(
    ...asPostgres(join(PG_BIN, 'pg_ctl'), ['-D', join(dir, 'data'), '-l', join(dir, 'log'), '-w', '-o', `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off`, 'start']),
    { stdio: 'ignore' },
  );
  // The features database as the API's migrations would leave it: schemas owned by `features`.
  sql('CREATE DATABASE features');
}, 60_000);

afterAll(() => {
  if (!available || !dir) return;
  try {
    execFileSync(...asPostgres(join(PG_BIN, 'pg_ctl'), ['-D', join(dir, 'data'), '-m', 'immediate', 'stop']), { stdio: 'ignore' });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

const featuresEnv = (featuresPw: string, geoserverPw: string) => ({
  PGUSER: 'postgres',
  PGPASSWORD: SUPERUSER_PASSWORD,
  PGDATABASE: 'features',
  FEATURES_DB_PASSWORD: featuresPw,
  GEOSERVER_DB_PASSWORD: geoserverPw,
});

describe.skipIf(!available)('features-db-roles.sh', () => {
  it('creates the roles; GeoServer may write only the rows a migration grants it, and no DDL', async () => {
    const result = await run('features-db-roles.sh', featuresEnv('features-pw-1', 'geoserver-pw-1'));
    expect(result.code, result.stderr).toBe(0);
    // What the API's migrations do, as `features`, after the job ran: tables, and GeoServer's grant on
    // the feature table alone (migration 020; services/api/test/geoserver-role.test.ts runs the real ones).
    sql('CREATE SCHEMA features; CREATE TABLE features.features (id text PRIMARY KEY, name text); CREATE SCHEMA history; CREATE TABLE history.changes (id serial PRIMARY KEY, feature_id text)', { user: 'features', password: 'features-pw-1', db: 'features' });
    sql('GRANT USAGE ON SCHEMA features TO geoserver; GRANT SELECT, INSERT, UPDATE, DELETE ON features.features TO geoserver', { user: 'features', password: 'features-pw-1', db: 'features' });
    const gs = { user: 'geoserver', password: 'geoserver-pw-1', db: 'features' };
    sql("INSERT INTO features.features VALUES ('f1', 'Alter Friedhof')", gs);
    // No default privileges: a table the API creates is not GeoServer's unless a migration grants it.
    expect(() => sql("INSERT INTO history.changes (feature_id) VALUES ('f1')", gs)).toThrow(/permission denied/);
    expect(sql('SELECT name FROM features.features', gs)).toBe('Alter Friedhof');
    expect(() => sql('CREATE TABLE features.evil (x int)', gs)).toThrow(/permission denied/);
    expect(() => sql('DROP TABLE features.features', gs)).toThrow(/must be owner/);
  });

  it('is idempotent and applies a rotated password', async () => {
    const again = await run('features-db-roles.sh', featuresEnv('features-pw-1', 'geoserver-pw-2'));
    expect(again.code, again.stderr).toBe(0);
    expect(canLogin('geoserver', 'geoserver-pw-2', 'features')).toBe(true);
    expect(canLogin('geoserver', 'geoserver-pw-1', 'features')).toBe(false);
    expect(sql('SELECT count(*) FROM features.features', { user: 'geoserver', password: 'geoserver-pw-2', db: 'features' })).toBe('1');
  });

  it('refuses to run without the passwords (exit 1 or 2, naming the variable)', async () => {
    const result = await run('features-db-roles.sh', { PGUSER: 'postgres', PGPASSWORD: SUPERUSER_PASSWORD, PGDATABASE: 'features', GEOSERVER_DB_PASSWORD: 'x' });
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain('FEATURES_DB_PASSWORD');
  });
});

describe.skipIf(!available)('identity-db-roles.sh', () => {
  const identityEnv = (kratos: string, hydra: string, login = 'login-pw') => ({ PGUSER: 'postgres', PGPASSWORD: SUPERUSER_PASSWORD, KRATOS_DB_PASSWORD: kratos, HYDRA_DB_PASSWORD: hydra, LOGIN_DB_PASSWORD: login });

  it('creates separate kratos, hydra and login databases and users that cannot enter each other', async () => {
    const first = await run('identity-db-roles.sh', identityEnv('kratos-pw', 'hydra-pw'));
    expect(first.code, first.stderr).toBe(0);
    expect(canLogin('kratos', 'kratos-pw', 'kratos')).toBe(true);
    expect(canLogin('hydra', 'hydra-pw', 'hydra')).toBe(true);
    expect(canLogin('login', 'login-pw', 'login')).toBe(true);
    expect(canLogin('kratos', 'kratos-pw', 'hydra')).toBe(false);
    expect(canLogin('hydra', 'hydra-pw', 'kratos')).toBe(false);
    expect(canLogin('login', 'login-pw', 'kratos')).toBe(false);
    expect(canLogin('login', 'login-pw', 'hydra')).toBe(false);
    expect(canLogin('kratos', 'kratos-pw', 'login')).toBe(false);
    expect(sql("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'kratos'")).toBe('kratos');
    // The login app makes its own table in its own database (identity/src/app/rate-limit-store.ts).
    expect(sql("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'login'")).toBe('login');
    expect(sql('SELECT rolsuper OR rolcreatedb OR rolcreaterole FROM pg_roles WHERE rolname = $$login$$')).toBe('f');
  });

  it('running it twice is a no-op apart from (re)setting the passwords', async () => {
    const second = await run('identity-db-roles.sh', identityEnv('kratos-pw', 'hydra-pw'));
    expect(second.code, second.stderr).toBe(0);
    expect(sql("SELECT count(*) FROM pg_database WHERE datname IN ('kratos', 'hydra', 'login')")).toBe('3');
  });

  it('refuses to run without the login role\'s password, naming the variable', async () => {
    const { LOGIN_DB_PASSWORD: _omitted, ...rest } = identityEnv('kratos-pw', 'hydra-pw');
    const result = await run('identity-db-roles.sh', rest);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain('LOGIN_DB_PASSWORD');
  });
});

describe.skipIf(!available)('backup.sh', () => {
  const backupEnv = (backupDir: string) => ({
    BACKUP_ONCE: '1',
    BACKUP_DIR: backupDir,
    BACKUP_DATABASES: `features=127.0.0.1:${port}:features:postgres kratos=127.0.0.1:${port}:kratos:postgres`,
    PGPASSWORD_FEATURES: SUPERUSER_PASSWORD,
    PGPASSWORD_KRATOS: SUPERUSER_PASSWORD,
    BACKUP_RETENTION_DAYS: '14',
  });

  it('writes a restorable dump of each database and records the time of success', async () => {
    const backupDir = join(dir, 'backups');
    const result = await run('backup.sh', backupEnv(backupDir));
    expect(result.code, result.stderr + result.stdout).toBe(0);
    const dumps = readdirSync(join(backupDir, 'features'));
    expect(dumps).toHaveLength(1);
    expect(dumps[0]).toMatch(/^features-\d{8}T\d{6}Z\.dump$/);
    expect(existsSync(join(backupDir, 'kratos'))).toBe(true);
    expect(Number(execFileSync('cat', [join(backupDir, 'last-success')], { encoding: 'utf8' }))).toBeGreaterThan(Date.now() / 1000 - 60);
    // Restore drill: the documented pg_restore into a fresh database gives the same rows.
    sql('CREATE DATABASE features_restored');
    execFileSync(join(PG_BIN, 'pg_restore'), ['-U', 'postgres', '-d', 'features_restored', '--no-owner', join(backupDir, 'features', dumps[0] as string)], { env: env({ PGPASSWORD: SUPERUSER_PASSWORD }) });
    expect(sql('SELECT id, name FROM features.features', { db: 'features_restored' })).toBe('f1|Alter Friedhof');
  });

  it('deletes dumps past the retention, never the newest one', async () => {
    const backupDir = join(dir, 'retention');
    const old = join(backupDir, 'features', 'features-20200101T000000Z.dump');
    await run('backup.sh', backupEnv(backupDir));
    writeFileSync(old, 'old');
    const longAgo = new Date('2020-01-01T00:00:00Z');
    utimesSync(old, longAgo, longAgo);
    await run('backup.sh', backupEnv(backupDir));
    const left = readdirSync(join(backupDir, 'features'));
    expect(left).not.toContain('features-20200101T000000Z.dump');
    expect(left.length).toBeGreaterThanOrEqual(1);
  });

  it('a failing database leaves no partial file and exits 1', async () => {
    const backupDir = join(dir, 'failing');
    const result = await run('backup.sh', { ...backupEnv(backupDir), BACKUP_DATABASES: `features=127.0.0.1:${port}:nosuchdb:postgres`, PGPASSWORD_FEATURES: SUPERUSER_PASSWORD });
    expect(result.code).toBe(1);
    expect(readdirSync(join(backupDir, 'features'))).toEqual([]);
    expect(existsSync(join(backupDir, 'last-success'))).toBe(false);
  });
});

describe('the job scripts', () => {
  it('are shellcheck-clean', () => {
    const scripts = readdirSync(JOBS).filter((f) => f.endsWith('.sh'));
    expect(scripts.sort()).toEqual(['backup-offsite.sh', 'backup.sh', 'features-db-roles.sh', 'identity-db-roles.sh', 'restore.sh']);
    execFileSync('shellcheck', ['-s', 'sh', ...scripts.map((s) => join(JOBS, s))], { stdio: 'pipe' });
  });
});
