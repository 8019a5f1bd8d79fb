/**
 * Shared set-up of the QC tests: graphile-worker's schema in the test database, the QC worker
 * in-process against given export settings, and polling for asynchronous outcomes.
 */
import pg from 'pg';
import { pino } from 'pino';
import { ExportsEnvSchema, exportsSettingsFrom } from '../src/exports/config.js';
import { migrateQueue, startQcWorker, type QcWorker, type WorkerSettings } from '../src/qc/worker.js';
import type { TestApi } from '../../../test/helpers/api.js';
import type { TestDatabase } from '../../../test/helpers/db.js';

export const FAST_WORKER: WorkerSettings = { concurrency: 2, pollIntervalMs: 100, heartbeatMs: 500 };

/** The QC tables come with the migrations; graphile-worker's schema is installed at boot, here. */
export async function prepareQueue(db: TestDatabase): Promise<void> {
  await migrateQueue(db.pool);
}

export async function startWorker(db: TestDatabase, env: Record<string, string>): Promise<QcWorker & { pool: pg.Pool }> {
  const pool = new pg.Pool({ connectionString: db.url, max: 5 });
  pool.on('error', () => undefined);
  const worker = await startQcWorker({ pool, settings: exportsSettingsFrom(ExportsEnvSchema.parse(env)), worker: FAST_WORKER, logger: pino({ level: process.env.QC_TEST_LOG ?? 'silent' }) });
  return {
    processId: worker.processId,
    relayNow: () => worker.relayNow(),
    pool,
    async stop() {
      await worker.stop();
      await pool.end();
    },
  };
}

export async function waitFor<T>(what: string, probe: () => Promise<T | undefined | null | false>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export interface JobView {
  id: number;
  task: string;
  status: string;
  version: number;
  reason: string | null;
  result: Record<string, unknown> | null;
  attempts: number;
}

export async function reviewsOf(api: TestApi, featureId: string): Promise<{ status: string; transitions: Record<string, unknown>[]; jobs: JobView[]; exportRecords: Record<string, Record<string, unknown>> }> {
  const response = await api.request('GET', `/api/features/${encodeURIComponent(featureId)}/reviews`);
  if (response.status !== 200) throw new Error(`reviews answered ${response.status}: ${response.text}`);
  return response.json;
}

const FINISHED = new Set(['exported', 'unchanged', 'sent', 'conflict', 'failed', 'skipped', 'not_applicable']);

/** Wait until every job of the feature for `version` has a terminal outcome. */
export async function settledJobs(api: TestApi, featureId: string, version: number, count: number, timeoutMs = 30_000): Promise<JobView[]> {
  return waitFor(`jobs of ${featureId} v${version}`, async () => {
    const jobs = (await reviewsOf(api, featureId)).jobs.filter((j) => j.version === version);
    return jobs.length >= count && jobs.every((j) => FINISHED.has(j.status)) ? jobs : undefined;
  }, timeoutMs);
}
