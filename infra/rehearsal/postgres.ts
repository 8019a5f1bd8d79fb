/**
 * A throwaway PostgreSQL cluster for one database container of the stack: initdb under a temporary
 * folder as the `postgres` user (as .ci/run does), on a loopback port, with password authentication
 * over TCP as in the official images, initialised the way the image's entrypoint initialises it
 * (POSTGRES_USER's password, POSTGRES_DB, and for the PostGIS image the postgis extension).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { appendFileSync, chmodSync, chownSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const PG_BIN = process.env.PG_BIN ?? '/usr/lib/postgresql/15/bin';

export interface Cluster {
  port: number;
  dir: string;
  /** A superuser URL over the socket-less TCP path (password auth). */
  url(database: string): string;
  psql(database: string, sql: string): string;
  stop(): void;
}

function postgresIds(): { uid: number; gid: number } {
  const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
  const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
  return { uid, gid };
}

/** What is missing to run clusters here, or undefined. */
export function clusterUnavailable(): string | undefined {
  if (!existsSync(join(PG_BIN, 'initdb'))) return `no PostgreSQL binaries in ${PG_BIN} (apt-get install postgresql-15 postgresql-15-postgis-3, or set PG_BIN)`;
  if (spawnSync('id', ['-u', 'postgres']).status !== 0) return 'no postgres system user (installed with the postgresql-15 package)';
  if (process.getuid?.() !== 0) return 'not root: initdb must run as the postgres user (runuser)';
  return undefined;
}

export function startCluster(options: { port: number; superuser: string; password: string; database: string; postgis: boolean }): Cluster {
  const dir = mkdtempSync(join(tmpdir(), 'rehearsal-pg-'));
  const { uid, gid } = postgresIds();
  chownSync(dir, uid, gid);
  chmodSync(dir, 0o700);
  const asPostgres = (program: string, args: string[]) =>
    execFileSync('runuser', ['-u', 'postgres', '--', join(PG_BIN, program), ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  const passwordFile = join(dir, 'pwfile');
  writeFileSync(passwordFile, `${options.password}\n`);
  chownSync(passwordFile, uid, gid);
  asPostgres('initdb', ['-D', join(dir, 'data'), '-U', options.superuser, `--pwfile=${passwordFile}`, '--auth-local=trust', '--auth-host=scram-sha-256', '-E', 'UTF8']);
  rmSync(passwordFile);
  appendFileSync(join(dir, 'data', 'postgresql.conf'), `\nlisten_addresses = '127.0.0.1'\nport = ${options.port}\nunix_socket_directories = '${dir}'\nfsync = off\n`);
  asPostgres('pg_ctl', ['-D', join(dir, 'data'), '-l', join(dir, 'log'), '-w', 'start']);
  const psql = (database: string, sql: string) =>
    execFileSync('runuser', ['-u', 'postgres', '--', join(PG_BIN, 'psql'), '-h', dir, '-p', String(options.port), '-U', options.superuser, '-d', database, '-v', 'ON_ERROR_STOP=1', '-qAtc', sql], { encoding: 'utf8' });
  if (options.database !== 'postgres') psql('postgres', `CREATE DATABASE "${options.database}"`);
  // The postgis image's initdb script creates the extension in POSTGRES_DB.
  if (options.postgis) psql(options.database, 'CREATE EXTENSION IF NOT EXISTS postgis');
  return {
    port: options.port,
    dir,
    url: (database) => `postgres://${encodeURIComponent(options.superuser)}:${encodeURIComponent(options.password)}@127.0.0.1:${options.port}/${database}`,
    psql,
    stop() {
      spawnSync('runuser', ['-u', 'postgres', '--', join(PG_BIN, 'pg_ctl'), '-D', join(dir, 'data'), '-m', 'immediate', 'stop'], { stdio: 'ignore' });
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
