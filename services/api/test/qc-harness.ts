/**
 * Shared set-up of the QC tests: graphile-worker's schema in the test database, the QC worker
 * in-process against given export settings, and polling for asynchronous outcomes.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import pg from 'pg';
import { pino } from 'pino';
import { ExportsEnvSchema, exportsSettingsFrom } from '../src/exports/config.js';
import { migrateQueue } from '../src/qc/queue.js';
import { startQcWorker, type QcWorker, type WorkerSettings } from '../src/qc/worker.js';
import type { TestApi } from '../../../test/helpers/api.js';
import type { TestDatabase } from '../../../test/helpers/db.js';
import { eventually } from '../../../test/helpers/wait.js';

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

/** The QC tests' wait: test/helpers/wait.ts (vi.waitFor), polling every 100 ms. */
export function waitFor<T>(what: string, probe: () => Promise<T | undefined | null | false>, timeoutMs = 20_000): Promise<T> {
  return eventually(what, probe, timeoutMs, 100);
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

/**
 * `services/api/src/qc/worker-main.ts` as a real process (so a test can SIGKILL it), with the fast worker
 * settings, the given export settings and its output kept. Added to `children` for the test's clean-up.
 */
export function startWorkerProcess(databaseUrl: string, exportEnv: Record<string, string>, children: ChildProcess[]): ChildProcess & { output: () => string } {
  const child = spawn(process.execPath, ['--import', 'tsx', 'services/api/src/qc/worker-main.ts'], {
    cwd: join(import.meta.dirname, '../../..'),
    env: { PATH: process.env.PATH, DATABASE_URL: databaseUrl, LOG_LEVEL: 'info', WORKER_CONCURRENCY: '2', WORKER_POLL_INTERVAL_MS: '100', WORKER_HEARTBEAT_MS: '300', ...exportEnv },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  children.push(child);
  return Object.assign(child, { output: () => output });
}

/** Resolves once the process has exited (at once when it already has). */
export const exitOf = (child: ChildProcess) => new Promise<void>((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.once('exit', () => resolve())));
