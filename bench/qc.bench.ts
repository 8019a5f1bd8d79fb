/**
 * QC workflow benchmark (`npm run bench -- qc`).
 *
 * 1. Approvals per second: the approve transaction of the QC service (lock, status, transition
 *    record and its three side-effect jobs in one statement: the qc.jobs outbox rows, which the
 *    worker's relay turns into graphile jobs outside the transaction) against the same transaction
 *    without the queue (lock, status, transition record, the submitter's notice; bench/qc-queue.ts
 *    approveWithoutQueue) — same database, same run, alternating
 *    rounds, 8 approvals in flight. The ratio is the cost of queueing side effects transactionally.
 * 3. Conflation (see conflationThroughput): export throughput with conflation against without.
 * 2. Drain: 1 000 approvals (BENCH_QUICK: 200) exported by the QC worker to the local OSM API double
 *    (nearby approvals batched: one changeset and one upload per batch), from the first job to the
 *    last recorded outcome;
 *    against the baseline of the same exports run by the exporter directly, at the same concurrency,
 *    without the queue.
 *
 * Database: BENCH_DATABASE_URL or TEST_DATABASE_URL (a PostgreSQL superuser URL; a scratch database is
 * created and dropped), else an in-memory embedded PGlite in this process.
 */
import pg from 'pg';
import { pino } from 'pino';
import { readFileSync } from 'node:fs';
import { startOsmApiDouble } from '../services/shared/testing/osm-api.js';
import { startOverpassDouble } from '../test/doubles/overpass.js';
import { loadOsmTagMapping, withOsmTagMapping } from '../services/api/src/exports/osm-tag-mapping.js';
import { migrate } from '../services/api/src/db/migrate.js';
import { SEED_CATEGORY_MAPPING } from '../services/api/src/exports/category-mapping.js';
import { ExportsEnvSchema, exportsSettingsFrom } from '../services/api/src/exports/config.js';
import { createMemoryJournal } from '../services/api/src/exports/journal.js';
import { OsmExporter } from '../services/api/src/exports/osm/exporter.js';
import { createQcService } from '../services/api/src/qc/service.js';
import { migrateQueue } from '../services/api/src/qc/queue.js';
import { relayOutbox, startQcWorker } from '../services/api/src/qc/worker.js';
import { approveWithoutQueue, BENCH_REVIEWER, inFlight, seedSubmissions } from './qc-queue.js';
import { median, printTable, ratio } from './stats.js';
import { openBenchDatabase } from './support.js';

const quick = process.env.BENCH_QUICK === '1';
const ROUNDS = quick ? 2 : 5;
const PER_ROUND = quick ? 100 : 300;
const IN_FLIGHT = 8;
const DRAIN = quick ? 200 : 1000;
/** BENCH_QC_PARTS=approve or =drain runs one part only (both by default). */
const PARTS = new Set((process.env.BENCH_QC_PARTS ?? 'approve,conflation,drain').split(','));
const CONFLATION_PER_ROUND = quick ? 100 : 300;
const CONCURRENCY = Number(process.env.BENCH_WORKER_CONCURRENCY ?? 4);

/**
 * 3. Conflation: OSM exports by the exporter directly at CONCURRENCY, against the OSM API double
 *    seeded with the Leipzig fixture (1 114 elements; the Overpass double over the same data), with
 *    conflation through the map call, through Overpass, and without conflation (the baseline, as
 *    before conflation existed) — alternating rounds. Also counts the lookups per feature (≤ 1).
 */
async function conflationThroughput(): Promise<void> {
  const world = await startOsmApiDouble();
  const overpass = await startOverpassDouble(world);
  try {
    world.seed(readFileSync(new URL('../test/fixtures/osm/leipzig-extract.osm', import.meta.url), 'utf8'));
    const mapping = withOsmTagMapping(SEED_CATEGORY_MAPPING, loadOsmTagMapping());
    const modes = { none: 'false', map: 'map', overpass: 'overpass' } as const;
    type Mode = keyof typeof modes;
    const exporters = Object.fromEntries(
      (Object.keys(modes) as Mode[]).map((mode) => {
        const env: Record<string, string> = { OSM_API_URL: world.url, OSM_ACCESS_TOKEN: 'test-token', OVERPASS_URL: overpass.url, EXPORT_DATA_LICENCE: 'CC0-1.0', EXPORT_HTTP_TIMEOUT_MS: '30000' };
        if (mode === 'none') env.OSM_CONFLATION = 'false';
        else env.OSM_CONFLATION_SOURCE = mode;
        return [mode, new OsmExporter({ settings: exportsSettingsFrom(ExportsEnvSchema.parse(env)), mapping })];
      }),
    ) as Record<Mode, OsmExporter>;
    const rates: Record<Mode, number[]> = { none: [], map: [], overpass: [] };
    const lookups: Record<Mode, number> = { none: 0, map: 0, overpass: 0 };
    let n = 0;
    const lookupCount = () => overpass.queries.length + world.requests.filter((r) => r.path === '/api/0.6/map').length;
    for (let round = 0; round < ROUNDS; round++) {
      const order: Mode[] = round % 3 === 0 ? ['none', 'map', 'overpass'] : round % 3 === 1 ? ['map', 'overpass', 'none'] : ['overpass', 'none', 'map'];
      for (const mode of order) {
        // Points on a grid over the city, ~180 m apart, never the same spot twice (a memorial each, names
        // unlike any in the extract): conflation looks, finds nothing near enough, creates.
        const snapshots = Array.from({ length: CONFLATION_PER_ROUND }, () => {
          n++;
          return { id: `conf-${n}`, version: 1, name: `Gedenkpunkt ${n}`, kategorie: 'denkmal', geometry: { type: 'Point' as const, coordinates: [12.26 + (n % 64) * 0.0037, 51.29 + Math.floor(n / 64) * 0.0016] as [number, number] } };
        });
        const before = lookupCount();
        const ms = await inFlight(snapshots, CONCURRENCY, async (snapshot) => {
          const outcome = await exporters[mode].export({ snapshot, previous: null, journal: createMemoryJournal() });
          if (outcome.status !== 'exported') throw new Error(`${mode}: ${JSON.stringify(outcome).slice(0, 300)}`);
        });
        lookups[mode] += lookupCount() - before;
        rates[mode].push((CONFLATION_PER_ROUND / ms) * 1000);
      }
    }
    const perFeature = (mode: Mode) => (lookups[mode] / (CONFLATION_PER_ROUND * ROUNDS)).toFixed(2);
    printTable((Object.keys(modes) as Mode[]).map((mode) => ({
      'OSM export (Leipzig extract loaded)': mode === 'none' ? 'without conflation (baseline)' : `with conflation via ${mode === 'map' ? 'the map call' : 'Overpass'}`,
      'exports/s (median)': median(rates[mode]).toFixed(0),
      rounds: rates[mode].map((r) => r.toFixed(0)).join(' '),
      'lookups/feature': perFeature(mode),
    })));
    console.log(`conflation throughput ratio map/none: ${ratio(median(rates.map), median(rates.none))}, overpass/none: ${ratio(median(rates.overpass), median(rates.none))}`);
    if (lookups.map > CONFLATION_PER_ROUND * ROUNDS || lookups.overpass > CONFLATION_PER_ROUND * ROUNDS) throw new Error('conflation made more than one lookup per feature');
  } finally {
    await Promise.all([world.close(), overpass.close()]);
  }
}

async function main(): Promise<void> {
  const database = await openBenchDatabase('qc');
  const pool = new pg.Pool({ connectionString: database.url, max: IN_FLIGHT + 2 });
  pool.on('error', () => undefined);
  const osm = await startOsmApiDouble();
  try {
    await migrate(pool);
    await migrateQueue(pool);
    const service = createQcService(pool, { maxAttempts: 12 });
    console.log(`database: ${database.kind}; ${ROUNDS} rounds × ${PER_ROUND} approvals per mode, ${IN_FLIGHT} in flight`);

    if (PARTS.has('approve')) {
      // 1. approvals per second, with and without the queue, alternating.
      const rates: Record<'queued' | 'bare', number[]> = { queued: [], bare: [] };
      // A warm-up of both modes, not counted: otherwise the first round's first mode pays for cold
      // caches and plans alone.
      for (const mode of ['queued', 'bare'] as const) {
        const ids = await seedSubmissions(pool, `w${mode[0]}-`, 50);
        await inFlight(ids, IN_FLIGHT, (id) => (mode === 'queued' ? service.approve(BENCH_REVIEWER, id, null) : approveWithoutQueue(pool, id)));
      }
      for (let round = 0; round < ROUNDS; round++) {
        const order: ('queued' | 'bare')[] = round % 2 === 0 ? ['queued', 'bare'] : ['bare', 'queued'];
        for (const mode of order) {
          const ids = await seedSubmissions(pool, `${mode[0]}${round}-`, PER_ROUND);
          const ms = await inFlight(ids, IN_FLIGHT, (id) => (mode === 'queued' ? service.approve(BENCH_REVIEWER, id, null) : approveWithoutQueue(pool, id)));
          rates[mode].push((PER_ROUND / ms) * 1000);
        }
      }
      const jobsQueued = Number((await pool.query(`SELECT count(*) FROM qc.jobs`)).rows[0].count);
      const queuedRate = median(rates.queued);
      const bareRate = median(rates.bare);
      printTable([
        { approval: 'with 3 queued jobs (qc.jobs outbox rows, relayed by the worker)', 'approvals/s (median)': queuedRate.toFixed(0), rounds: rates.queued.map((r) => r.toFixed(0)).join(' ') },
        { approval: 'same transaction without the queue', 'approvals/s (median)': bareRate.toFixed(0), rounds: rates.bare.map((r) => r.toFixed(0)).join(' ') },
      ]);
      console.log(`throughput ratio queued/bare: ${ratio(queuedRate, bareRate)} (jobs queued: ${jobsQueued})`);
      // What the outbox moves out of the approval: the relay's work, here all of part 1's jobs at once.
      const relayStarted = performance.now();
      const relayed = await relayOutbox(pool);
      const relayMs = performance.now() - relayStarted;
      console.log(`relay: ${relayed} outbox rows → graphile jobs in ${relayMs.toFixed(0)} ms (${((relayed / relayMs) * 1000).toFixed(0)} jobs/s, rounds of up to RELAY_LIMIT rows with one add_jobs each, one graphile batch job per named queue)`);
    }

    if (PARTS.has('conflation')) await conflationThroughput();
    if (!PARTS.has('drain')) return;
    // 2. drain: clear the queue of part 1, approve DRAIN features, start the worker, wait for the last outcome.
    await pool.query(`DELETE FROM graphile_worker._private_jobs`);
    await pool.query(`UPDATE qc.jobs SET status = 'skipped', reason = 'bench part 1' WHERE status = 'queued'`);
    await pool.query(`DELETE FROM qc.job_outbox`);
    const drainIds = await seedSubmissions(pool, 'd-', DRAIN);
    await inFlight(drainIds, IN_FLIGHT, (id) => service.approve(BENCH_REVIEWER, id, null));
    const settings = exportsSettingsFrom(ExportsEnvSchema.parse({ OSM_API_URL: osm.url, OSM_ACCESS_TOKEN: 'test-token', EXPORT_HTTP_TIMEOUT_MS: '30000', EXPORT_DATA_LICENCE: 'CC0-1.0', OSM_CONFLATION: 'false' }));
    const workerPool = new pg.Pool({ connectionString: database.url, max: CONCURRENCY + 3 });
    workerPool.on('error', () => undefined);
    const started = performance.now();
    const worker = await startQcWorker({ pool: workerPool, settings, worker: { concurrency: CONCURRENCY, pollIntervalMs: 200, heartbeatMs: 5_000 }, logger: pino({ level: 'warn' }), mailer: null });
    for (;;) {
      const { rows } = await pool.query(`SELECT count(*) FILTER (WHERE status IN ('queued', 'running', 'retrying'))::int AS pending,
                                                count(*) FILTER (WHERE task = 'osm_export' AND status = 'exported')::int AS exported
                                         FROM qc.jobs WHERE feature_id LIKE 'd-%'`);
      if (rows[0].pending === 0) {
        if (rows[0].exported !== DRAIN) throw new Error(`only ${rows[0].exported} of ${DRAIN} OSM exports succeeded`);
        break;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    const drainMs = performance.now() - started;
    const changesets = Number((await pool.query(`SELECT count(DISTINCT result->>'changesetId') AS n FROM qc.jobs WHERE feature_id LIKE 'd-%' AND task = 'osm_export'`)).rows[0].n);
    await worker.stop();
    await workerPool.end();

    // Baseline: the same exports by the exporter directly, same concurrency, no queue, no database.
    const exporter = new OsmExporter({ settings, mapping: SEED_CATEGORY_MAPPING });
    const directMs = await inFlight(drainIds, CONCURRENCY, async (id) => {
      const outcome = await exporter.export({
        snapshot: { id: `direct-${id}`, version: 1, name: `Direct ${id}`, kategorie: 'friedhof', geometry: { type: 'Point', coordinates: [13.5, 52.5] } },
        previous: null,
        journal: createMemoryJournal(),
      });
      if (outcome.status !== 'exported') throw new Error(`direct export: ${JSON.stringify(outcome)}`);
    });
    printTable([
      { drain: `${DRAIN} approvals through the queue (${DRAIN * 3} jobs, worker concurrency ${CONCURRENCY}; ${changesets} changesets, nearby approvals batched)`, seconds: (drainMs / 1000).toFixed(1), 'OSM exports/s': ((DRAIN / drainMs) * 1000).toFixed(0) },
      { drain: `${DRAIN} OSM exports by the exporter directly (concurrency ${CONCURRENCY})`, seconds: (directMs / 1000).toFixed(1), 'OSM exports/s': ((DRAIN / directMs) * 1000).toFixed(0) },
    ]);
    console.log(`drain time ratio queue/direct: ${ratio(drainMs, directMs)}`);
  } finally {
    await pool.end();
    await osm.close();
    await database.close();
  }
}

await main();
