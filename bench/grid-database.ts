/**
 * A scratch database already holding the 100 000-feature grid (bench/feature-grid.ts), for the tile
 * and web benchmarks. Seeding the grid runs every feature trigger 100 000 times (about 40 s on a quiet
 * machine, two minutes on a loaded one); a copy of a seeded template database takes a few seconds. The
 * template `fp_bench_grid_<hash>` is built once per content of the migrations and of the seeding code,
 * so a changed migration or grid gets a fresh one, and is kept on the server for the next run
 * (drop it with `DROP DATABASE` when done). Without a PostgreSQL server (PGlite) it seeds directly.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { seedFeatureGrid } from './feature-grid.js';
import { openBenchDatabase, repoRoot, type BenchDatabase } from './support.js';

function templateName(): string {
  const hash = createHash('sha256');
  const migrations = join(repoRoot, 'services/api/migrations');
  for (const file of readdirSync(migrations).sort()) hash.update(file).update(readFileSync(join(migrations, file)));
  hash.update(readFileSync(join(repoRoot, 'bench/feature-grid.ts')));
  return `fp_bench_grid_${hash.digest('hex').slice(0, 12)}`;
}

const adminUrlOf = () => process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL;

function urlFor(adminUrl: string, database: string): string {
  const url = new URL(adminUrl);
  url.pathname = `/${database}`;
  return url.toString();
}

/** Builds the template unless it exists; two runs building at once both succeed (one keeps its copy). */
async function ensureTemplate(adminUrl: string, admin: pg.Client, log: (message: string) => void): Promise<string> {
  const name = templateName();
  const exists = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
  if (exists.rowCount) return name;
  const building = `${name}_${process.pid}`;
  await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(building)}`);
  try {
    log(`seeding the 100 000-feature grid once into ${name} (kept for later runs)…`);
    const pool = new pg.Pool({ connectionString: urlFor(adminUrl, building), max: 2 });
    try {
      await seedFeatureGrid(pool);
    } finally {
      await pool.end();
    }
    await admin.query(`ALTER DATABASE ${pg.escapeIdentifier(building)} RENAME TO ${pg.escapeIdentifier(name)}`);
  } catch (error) {
    await admin.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(building)} WITH (FORCE)`);
    // Another run renamed its copy first: use that one.
    if ((await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).rowCount) return name;
    throw error;
  }
  return name;
}

export async function openGridDatabase(label: string, log: (message: string) => void = console.log): Promise<BenchDatabase> {
  const adminUrl = adminUrlOf();
  if (!adminUrl) {
    const database = await openBenchDatabase(label);
    const pool = new pg.Pool({ connectionString: database.url, max: 2 });
    await seedFeatureGrid(pool).finally(() => pool.end());
    return database;
  }
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    const template = await ensureTemplate(adminUrl, admin, log);
    const name = `fp_bench_${label}_${process.pid}`;
    await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(name)} TEMPLATE ${pg.escapeIdentifier(template)}`);
    const version = (await admin.query<{ server_version: string }>('SHOW server_version')).rows[0]!.server_version;
    return {
      url: urlFor(adminUrl, name),
      kind: `PostgreSQL ${version} (a copy of ${template})`,
      async close() {
        const cleaner = new pg.Client({ connectionString: adminUrl });
        await cleaner.connect();
        await cleaner.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`);
        await cleaner.end();
      },
    };
  } finally {
    await admin.end();
  }
}
