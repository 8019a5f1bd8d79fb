/**
 * The growth benchmarks' databases: 10 000, 100 000 and 1 000 000 realistic features over one
 * city-sized area (bench/growth.bench.ts, bench/tile-growth.bench.ts), so the same request can be
 * timed on ten and a hundred times the data.
 *
 * The mix: 40 % points, 25 % polygons of 6–60 vertices, 20 % lines of 2–20 vertices, 15 %
 * multipolygons of 2–4 parts, over Berlin's extent (13.09–13.76°E, 52.34–52.67°N, about 45 × 37 km),
 * denser towards the middle (each coordinate the mean of two uniform draws), coordinates with 7
 * decimals (about 1 cm), German names and addresses (so the stored text is not all ASCII). Every value
 * is a hash of the feature's number, so a size is the same data on every build and the first 10 000
 * features of the 1M database are the 10k database; ids are UUID-shaped and sort in no spatial order.
 *
 * Building (about 3 minutes for all three on a quiet 2-core machine; the progress is logged):
 * - The features are inserted by INSERT … SELECT generate_series, in two halves on two connections,
 *   with the BEFORE triggers that stamp the version and keep the stored GeoJSON (migration 006) on,
 *   so each row is exactly what the API would have written, and every other trigger off.
 * - What the triggers that were off would have written is then filled in bulk, set-based, with the
 *   triggers' own expressions: history.feature_versions (one 'insert' version per feature, as
 *   history.record_feature_version writes it, migrations 006/014) and features.tile_features
 *   (features.web_mercator(geom), as features.keep_tile_feature, migration 017; its own BEFORE trigger
 *   stamps each row, migration 018) and features.list_keys (ST_Envelope(geom), as
 *   features.keep_list_key, migration 024). A migration that adds a trigger to features.features whose
 *   table must not start empty needs its bulk fill here too; the build checks that the tables it
 *   fills hold one row per feature. (Migration 023's change log stays empty: nothing has changed.)
 * - The secondary indexes of those tables are dropped before and rebuilt after (a GiST index built
 *   over a full table is sorted once instead of split a million times), then VACUUM ANALYZE, so the
 *   visibility map is set and index-only scans can skip the heap as on a settled production table.
 *
 * Reuse: each size is a named database, fp_growth_<size>, built once and kept on the server. Its
 * comment names a hash of the migrations and of the build (schemaMarker); a database whose comment
 * does not match (a new migration, a changed generator) is dropped and built again. A benchmark must
 * not write into them (bench/growth.bench.ts writes into a copy). Drop them with
 * `DROP DATABASE fp_growth_10k` (…_100k, …_1m) when done.
 *
 * Needs a PostgreSQL server with PostGIS: BENCH_DATABASE_URL or TEST_DATABASE_URL (a superuser URL).
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { migrate } from '../services/api/src/db/migrate.js';
import { processCpuMicros, repoRoot } from './support.js';

export const GROWTH_SIZES = [10_000, 100_000, 1_000_000] as const;
export type GrowthSize = (typeof GROWTH_SIZES)[number];

/** The city the features lie in, longitude/latitude. */
export const CITY = { minLon: 13.09, minLat: 52.34, maxLon: 13.76, maxLat: 52.67 } as const;

/** Metres per degree at the city's latitude (52.5°N), for sizes given in metres. */
const METRES_PER_DEGREE_LAT = 111_320;
const METRES_PER_DEGREE_LON = 67_770;

export interface GrowthDatabase {
  size: GrowthSize;
  name: string;
  url: string;
  /** What the figures were measured on, for the printed report. */
  kind: string;
}

export function sizeLabel(size: number): string {
  return size >= 1_000_000 ? `${size / 1_000_000}m` : `${size / 1_000}k`;
}

export function databaseName(size: GrowthSize): string {
  return `fp_growth_${sizeLabel(size)}`;
}

/**
 * The schema version a built database must carry: the migrations, and what the build runs (its SQL
 * and the code of its steps), so an edit elsewhere in this file (a comment) keeps the databases.
 */
export function schemaMarker(): string {
  const hash = createHash('sha256');
  const migrations = join(repoRoot, 'services/api/migrations');
  for (const file of readdirSync(migrations).sort()) hash.update(file).update(readFileSync(join(migrations, file)));
  for (const part of [CREATE_SHAPES, INSERT_SHAPES, INSERT_FEATURES, FILL_TILE_FEATURES, FILL_LIST_KEYS, ...ROW_TRIGGERS, ...LOADED_TABLES]) hash.update(part);
  for (const step of [fill, connectBuilders, dropSecondaryIndexes, historyStatement]) hash.update(step.toString());
  return `bench/million.ts ${hash.digest('hex').slice(0, 16)}`;
}

/** The id of feature `n` (1…size) of every growth database, as INSERT_FEATURES makes it. */
export function featureId(n: number): string {
  const hex = createHash('md5').update(`growth-${n}`).digest('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

export function adminUrl(): string | undefined {
  return process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL;
}

function urlFor(admin: string, database: string): string {
  const url = new URL(admin);
  url.pathname = `/${database}`;
  return url.toString();
}

/**
 * The databases of the given sizes, each built unless a current one exists. Two runs building the same
 * size at once both succeed: each builds its own copy, the first to finish renames it into place and
 * the other drops its own.
 */
export async function openGrowthDatabases(sizes: readonly GrowthSize[] = GROWTH_SIZES, log: (message: string) => void = console.log): Promise<GrowthDatabase[]> {
  const admin = adminUrl();
  if (!admin) throw new Error('the growth databases need a PostgreSQL server: set BENCH_DATABASE_URL or TEST_DATABASE_URL (a superuser URL)');
  const marker = schemaMarker();
  const client = new pg.Client({ connectionString: admin });
  await client.connect();
  try {
    const version = (await client.query<{ server_version: string }>('SHOW server_version')).rows[0]!.server_version;
    const databases: GrowthDatabase[] = [];
    for (const size of sizes) {
      const name = databaseName(size);
      if ((await markerOf(client, name)) !== marker) await build(client, admin, size, marker, log);
      else log(`${name}: current (${marker}), reused`);
      databases.push({ size, name, url: urlFor(admin, name), kind: `PostgreSQL ${version}, ${name}` });
    }
    return databases;
  } finally {
    await client.end();
  }
}

async function markerOf(client: pg.Client, name: string): Promise<string | null | undefined> {
  const { rows } = await client.query<{ marker: string | null }>(`SELECT shobj_description(oid, 'pg_database') AS marker FROM pg_database WHERE datname = $1::text`, [name]);
  return rows[0] ? rows[0].marker : undefined;
}

async function build(client: pg.Client, admin: string, size: GrowthSize, marker: string, log: (message: string) => void): Promise<void> {
  const name = databaseName(size);
  const building = `${name}_building_${process.pid}`;
  const started = performance.now();
  const step = (what: string) => log(`${name}: ${what} (${((performance.now() - started) / 1000).toFixed(1)} s)`);
  log(`${name}: building ${size.toLocaleString('en')} features (${marker})…`);
  await client.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(building)} WITH (FORCE)`);
  await client.query(`CREATE DATABASE ${pg.escapeIdentifier(building)}`);
  try {
    // Two connections: the two halves of each step run side by side on the server's two cores.
    await fill(urlFor(admin, building), size, step);
    await client.query(`COMMENT ON DATABASE ${pg.escapeIdentifier(building)} IS ${pg.escapeLiteral(marker)}`);
    // A stale one goes only now, so a failed build leaves the old database in place.
    await client.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`);
    await client.query(`ALTER DATABASE ${pg.escapeIdentifier(building)} RENAME TO ${pg.escapeIdentifier(name)}`);
    step('built');
  } catch (error) {
    await client.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(building)} WITH (FORCE)`);
    // Another run renamed its current copy into place first: use that one.
    if ((await markerOf(client, name)) === marker) return;
    throw error;
  }
}

/** The triggers that stay on during the load: they shape the row itself (migrations 001, 006). */
const ROW_TRIGGERS = ['features_stamp_version', 'zz_features_keep_geojson'];

/** The tables whose secondary indexes are rebuilt after the load. */
const LOADED_TABLES = ['features.features', 'history.feature_versions', 'features.tile_features', 'features.list_keys'];

/** Two connections to the database being built, and what their backends have used of the CPU. */
interface Builders {
  clients: [pg.Client, pg.Client];
  /** Runs the two statements side by side, one per connection. */
  both(first: string, second: string, values?: [unknown[], unknown[]]): Promise<void>;
  /** CPU seconds both backends used so far. */
  cpuSeconds(): number;
}

async function connectBuilders(url: string): Promise<Builders> {
  const clients = [0, 1].map(() => new pg.Client({ connectionString: url, options: '-c synchronous_commit=off -c maintenance_work_mem=256MB -c jit=off' })) as [pg.Client, pg.Client];
  await Promise.all(clients.map((c) => c.connect()));
  const pids = await Promise.all(clients.map(async (c) => (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid));
  // The server may be on another host: then there is no CPU figure to read.
  const readable = pids.every((pid) => existsSync(`/proc/${pid}/stat`));
  return {
    clients,
    async both(first, second, values) {
      await Promise.all([clients[0].query(first, values?.[0]), clients[1].query(second, values?.[1])]);
    },
    cpuSeconds: () => (readable ? pids.reduce((sum, pid) => sum + processCpuMicros(pid), 0) / 1e6 : Number.NaN),
  };
}

async function fill(url: string, size: GrowthSize, step: (what: string) => void): Promise<void> {
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  try {
    await migrate(pool);
  } finally {
    await pool.end();
  }
  step('migrated');
  const builders = await connectBuilders(url);
  const [a] = builders.clients;
  const cpuBefore = builders.cpuSeconds();
  const cpu = () => `backends' CPU ${(builders.cpuSeconds() - cpuBefore).toFixed(1)} s`;
  try {
    const indexes = await dropSecondaryIndexes(a);
    const { rows: triggers } = await a.query<{ name: string }>(
      `SELECT tgname AS name FROM pg_trigger WHERE tgrelid = 'features.features'::regclass AND NOT tgisinternal AND tgname <> ALL ($1::text[]) ORDER BY 1`,
      [ROW_TRIGGERS],
    );
    for (const { name } of triggers) await a.query(`ALTER TABLE features.features DISABLE TRIGGER ${pg.escapeIdentifier(name)}`);
    await a.query(CREATE_SHAPES);
    await builders.both(INSERT_SHAPES, INSERT_SHAPES, [[0, SHAPES / 2 - 1], [SHAPES / 2, SHAPES - 1]]);
    step(`${SHAPES} shapes of each kind made; ${triggers.length} triggers off (${triggers.map((t) => t.name).join(', ')}); ${cpu()}`);

    const half = Math.ceil(size / 2);
    await builders.both(INSERT_FEATURES, INSERT_FEATURES, [[1, half], [half + 1, size]]);
    await a.query('DROP TABLE bench_shapes');
    step(`features inserted; ${cpu()}`);
    // Halves by id: ids are hex, so '8' splits them about evenly.
    const fillHistory = await historyStatement(a);
    await builders.both(fillHistory, fillHistory, [['', '8'], ['8', '~']]);
    step(`history filled; ${cpu()}`);
    await builders.both(FILL_TILE_FEATURES, FILL_TILE_FEATURES, [['', '8'], ['8', '~']]);
    step(`tile features filled; ${cpu()}`);
    await builders.both(FILL_LIST_KEYS, FILL_LIST_KEYS, [['', '8'], ['8', '~']]);
    step(`list keys filled; ${cpu()}`);

    for (const { name } of triggers) await a.query(`ALTER TABLE features.features ENABLE TRIGGER ${pg.escapeIdentifier(name)}`);
    // Two at a time, one per connection.
    const queue = [...indexes];
    await Promise.all(builders.clients.map(async (client) => {
      for (let definition = queue.shift(); definition !== undefined; definition = queue.shift()) await client.query(definition);
    }));
    step(`${indexes.length} indexes rebuilt; ${cpu()}`);
    // One after the other: a VACUUM beside another connection's ANALYZE (which holds a snapshot) left a
    // fifth of the pages of list_keys and tile_features without their all-visible bit, and an
    // index-only scan then reads the table after all.
    for (const table of LOADED_TABLES) await a.query(`VACUUM (ANALYZE) ${table}`);
    step(`vacuumed and analysed; ${cpu()}`);

    const { rows } = await a.query<Record<string, number>>(`SELECT ${LOADED_TABLES.map((t) => `(SELECT count(*) FROM ${t})::int AS ${pg.escapeIdentifier(t)}`).join(', ')}`);
    const counts = rows[0]!;
    if (Object.values(counts).some((n) => n !== size)) throw new Error(`the build is incomplete: ${JSON.stringify(counts)} for ${size}`);
  } finally {
    await Promise.all(builders.clients.map((c) => c.end()));
  }
}

/** Drops every index of LOADED_TABLES that is not a constraint's; returns the statements that make them again. */
async function dropSecondaryIndexes(client: pg.Client): Promise<string[]> {
  const { rows } = await client.query<{ name: string; definition: string }>(
    `SELECT format('%I.%I', n.nspname, c.relname) AS name, pg_get_indexdef(i.indexrelid) AS definition
     FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE i.indrelid = ANY ($1::text[]::regclass[]) AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)`,
    [LOADED_TABLES],
  );
  for (const { name } of rows) await client.query(`DROP INDEX ${name}`);
  return rows.map((r) => r.definition);
}

/** A uniform draw in [0, 1) from a number and a stream, the same on every build. */
const u = (n: string, stream: number) => `((hashint8extended((${n})::bigint, ${stream}) & 9007199254740991)::float8 / 9007199254740992.0)`;
/** A coordinate offset with 7 decimals. */
const r7 = (value: string) => `(round((${value}) * 1e7) / 1e7)`;
const dLon = (metres: string) => `((${metres}) / ${METRES_PER_DEGREE_LON}.0)`;
const dLat = (metres: string) => `((${metres}) / ${METRES_PER_DEGREE_LAT}.0)`;

/**
 * A star-shaped ring around (cx, cy) in degrees: `k` vertices at increasing angles, each at a radius
 * between 60 and 100 % of `radius` metres, so it never crosses itself (a valid polygon);
 * counter-clockwise, as RFC 7946 wants exteriors. Vertex j's radius is a draw of (seed, j mod k), so
 * the last position repeats the first exactly.
 */
function starPolygon(cx: string, cy: string, k: string, radius: string, seed: string): string {
  return `ST_MakePolygon(ST_MakeLine(ARRAY(
      SELECT ST_MakePoint(${r7(`${cx} + ${dLon('v.r * cos(v.a)')}`)}, ${r7(`${cy} + ${dLat('v.r * sin(v.a)')}`)})
      FROM generate_series(0, ${k}) AS j,
           LATERAL (SELECT 2 * pi() * (j % (${k})) / (${k}) AS a, (${radius}) * (0.6 + 0.4 * ${u(`(${seed}) * 64 + j % (${k})`, 7)}) AS r) AS v
      ORDER BY j)))`;
}

/**
 * Shapes are drawn once, SHAPES of each kind, around (0, 0); a feature is one of them moved to its
 * place (ST_Translate costs a fraction of drawing a shape per feature). 4 096 different polygons,
 * lines and multipolygons are far more than a list or a tile ever holds at once.
 */
const SHAPES = 4096;

const CREATE_SHAPES = `CREATE TABLE bench_shapes (kind text NOT NULL, n int NOT NULL, geom geometry NOT NULL, PRIMARY KEY (kind, n))`;

/**
 * Shapes $1..$2 of each kind: polygons of 6–60 vertices and 10–70 m, lines of 2–20 vertices 15–60 m
 * apart along a heading with sideways jitter, multipolygons of 2–4 parts of 6–20 vertices, up to
 * 30 m, 70 m apart (so the parts never touch).
 */
const INSERT_SHAPES = `
  INSERT INTO bench_shapes (kind, n, geom)
  SELECT 'polygon', n, ${starPolygon('0', '0', `6 + floor(${u('n', 5)} * 55)::int`, `10 + ${u('n', 6)} * 60`, 'n')}
  FROM generate_series($1::int, $2::int) AS n
  UNION ALL
  SELECT 'line', n, ST_MakeLine(ARRAY(
      SELECT ST_MakePoint(${r7(dLon('j * step * cos(heading) - jitter * sin(heading)'))}, ${r7(dLat('j * step * sin(heading) + jitter * cos(heading)'))})
      FROM generate_series(0, 1 + floor(${u('n', 5)} * 19)::int) AS j, LATERAL (SELECT step * 0.3 * (2 * ${u('n * 64 + j', 8)} - 1) AS jitter) AS v
      ORDER BY j))
  FROM generate_series($1::int, $2::int) AS n, LATERAL (SELECT 15 + ${u('n', 12)} * 45 AS step, 2 * pi() * ${u('n', 13)} AS heading) AS draw
  UNION ALL
  SELECT 'multipolygon', n, ST_Multi(ST_Collect(ARRAY(
      SELECT ${starPolygon(dLon('p * 70'), '0', `6 + floor(${u('n * 8 + p', 10)} * 15)::int`, `8 + ${u('n * 8 + p', 11)} * 22`, 'n * 8 + p')}
      FROM generate_series(0, 1 + floor(${u('n', 9)} * 3)::int) AS p ORDER BY p)))
  FROM generate_series($1::int, $2::int) AS n`;

/**
 * Features $1..$2. Place: the mean of two uniform draws per axis (denser in the middle), 7 decimals.
 * Kind by a draw: < 0.40 point, < 0.65 polygon, < 0.85 line, else a multipolygon; the shape a draw
 * among the kind's SHAPES.
 */
const INSERT_FEATURES = `
  INSERT INTO features.features (id, name, kategorie, adresse, telefon, geom, created_by)
  SELECT md5('growth-' || i)::uuid::text,
         (ARRAY['Friedhof','Gedenkstein','Blumenbeet','Grünanlage','Gärtnerei','Denkmal','Brunnen','Parkfriedhof','Rosengarten','Ehrenmal'])[1 + (i % 10)]
           || ' ' || (ARRAY['Nord','Süd','Ost','West','Mitte','am See','an der Spree','Höhe'])[1 + (i / 10) % 8] || ' ' || i,
         (ARRAY['friedhof','blumenbeet','denkmal'])[1 + i % 3],
         CASE WHEN ${u('i', 3)} < 0.6 THEN
           (ARRAY['Hauptstraße','Schloßstraße','Gartenweg','Lindenallee','Müllerstraße','Friedhofsweg','Am Markt','Kirchplatz'])[1 + (i / 7) % 8]
             || ' ' || (1 + i % 120) || ', ' || (10115 + i % 2000) || ' Berlin' END,
         CASE WHEN ${u('i', 4)} < 0.3 THEN '+49 30 ' || lpad((i % 10000000)::text, 7, '0') END,
         ST_SetSRID(CASE WHEN s.geom IS NULL THEN ST_MakePoint(draw.cx, draw.cy) ELSE ST_Translate(s.geom, draw.cx, draw.cy) END, 4326),
         'bench-seed'
  FROM generate_series($1::int, $2::int) AS i
  CROSS JOIN LATERAL (SELECT CASE WHEN k < 0.40 THEN 'point' WHEN k < 0.65 THEN 'polygon' WHEN k < 0.85 THEN 'line' ELSE 'multipolygon' END AS kind,
                             floor(${u('i', 14)} * ${SHAPES})::int AS shape,
                             ${r7(`${CITY.minLon} + ${CITY.maxLon - CITY.minLon} * (${u('i', 1)} + ${u('i', 21)}) / 2`)} AS cx,
                             ${r7(`${CITY.minLat} + ${CITY.maxLat - CITY.minLat} * (${u('i', 2)} + ${u('i', 22)}) / 2`)} AS cy
                      FROM (SELECT ${u('i', 0)} AS k) AS kind) AS draw
  LEFT JOIN bench_shapes s ON s.kind = draw.kind AND s.n = draw.shape`;

/**
 * One 'insert' version per feature, as history.record_feature_version (migrations 006, 014) writes
 * it: the row as JSON without geom and geojson, plus the geometry as GeoJSON. The row's JSON is
 * built column by column (every column of the table but those two, read from the catalogue), which
 * is the same jsonb as the trigger's to_jsonb(row) - 'geom' - 'geojson' at half the cost: to_jsonb of
 * the whole row converts the geometry and escapes the stored text only to drop them.
 */
async function historyStatement(client: pg.Client): Promise<string> {
  const { rows } = await client.query<{ name: string }>(
    `SELECT attname AS name FROM pg_attribute
     WHERE attrelid = 'features.features'::regclass AND attnum > 0 AND NOT attisdropped AND attname NOT IN ('geom', 'geojson') ORDER BY attnum`,
  );
  const row = rows.map(({ name }) => `${pg.escapeLiteral(name)}, to_jsonb(f.${pg.escapeIdentifier(name)})`).join(', ');
  return `
    INSERT INTO history.feature_versions (feature_id, version, operation, actor, recorded_at, snapshot)
    SELECT f.id, f.version, 'insert', f.created_by, f.created_at,
           jsonb_build_object(${row}) || jsonb_build_object('geometry', ST_AsGeoJSON(f.geom)::jsonb)
    FROM features.features f WHERE f.id >= $1::text AND f.id < $2::text`;
}

/** One row per feature, as features.keep_tile_feature (migration 017) writes it; its trigger stamps it (018). */
const FILL_TILE_FEATURES = `
  INSERT INTO features.tile_features (id, geom, kategorie, status, name)
  SELECT f.id, features.web_mercator(f.geom), f.kategorie, f.status, f.name
  FROM features.features f WHERE f.id >= $1::text AND f.id < $2::text`;

/** One row per feature, as features.keep_list_key (migration 024) writes it. */
const FILL_LIST_KEYS = `
  INSERT INTO features.list_keys (id, kategorie, box)
  SELECT f.id, f.kategorie, ST_Envelope(f.geom)
  FROM features.features f WHERE f.id >= $1::text AND f.id < $2::text`;

/** `npm exec tsx bench/million.ts [size…]`: builds (or checks) the databases and says which. */
if (import.meta.url === `file://${process.argv[1]}`) {
  const wanted = process.argv.slice(2).map(Number);
  const sizes = wanted.length ? GROWTH_SIZES.filter((s) => wanted.includes(s)) : GROWTH_SIZES;
  const started = performance.now();
  await openGrowthDatabases(sizes);
  console.log(`ready in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}
