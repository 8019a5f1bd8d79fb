/**
 * QC desk benchmark (`npm run bench -- qc-desk`): the time from a reviewer's decision to the next
 * item shown, at a queue of 1 000 items, through the API as the desk calls it.
 *
 * - decide + next: POST /api/qc/approve/:id, then what the desk does to show the next item. The desk
 *   fetches the next item's review view while the reviewer looks at the current one (GET
 *   /api/qc/queue?limit=20, then GET /api/qc/items/:next with its checks — untimed here, as it is off
 *   the reviewer's way), so after the decision only POST /api/qc/claim/:next remains.
 * - baseline: the decision alone (POST /api/qc/approve/:id) on another item of the same queue.
 * Interleaved, the order alternating, in one run; p50 and p99 of each and the ratio. The queue holds
 * at least 1 000 items throughout (1 000 + the items decided are seeded).
 *
 * The API runs as its own process (services/api/src/server.ts, worker off so the queued exports stay
 * queued). Database: BENCH_DATABASE_URL or TEST_DATABASE_URL (a scratch database is created and
 * dropped), else an in-memory embedded PGlite. BENCH_QUICK=1 shortens it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { loadOrCreateDevKeys } from '../services/api/src/auth/dev-keys.js';
import { migrate } from '../services/api/src/db/migrate.js';
import { openBenchDatabase, startApiProcess } from './support.js';
import { reportDecisionToNext, seedQueue } from './qc-queue.js';

const quick = process.env.BENCH_QUICK === '1';
const QUEUE = 1_000;
const ROUNDS = quick ? 20 : 150;

async function call(method: string, url: string, token: string, expected: number): Promise<unknown> {
  const response = await fetch(url, { method, headers: { authorization: `Bearer ${token}` } });
  const text = await response.text();
  if (response.status !== expected) throw new Error(`${method} ${url}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

async function timeIt(work: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await work();
  return performance.now() - started;
}

async function main(): Promise<void> {
  const database = await openBenchDatabase('qcdesk');
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-qc-desk-'));
  const pool = new pg.Pool({ connectionString: database.url, max: 2 });
  let api: Awaited<ReturnType<typeof startApiProcess>> | undefined;
  try {
    await migrate(pool);
    const ids = await seedQueue(pool, QUEUE + 2 * ROUNDS);
    console.log(`database: ${database.kind}; queue of ${ids.length} items seeded`);
    api = await startApiProcess({ DATABASE_URL: database.url, DATA_DIR: dataDir, WORKER_ENABLED: 'false', QC_CITY_EXTENT: '13.0,52.3,13.8,52.7' });
    const token = await (await loadOrCreateDevKeys(dataDir)).sign({ sub: 'bench-reviewer', role: 'reviewer' });
    const base = api.base;

    // The desk's prefetch while the reviewer reads: the first item nobody else holds, with its review data.
    const prefetchNext = async (current: string | undefined): Promise<string> => {
      const queue = (await call('GET', `${base}/api/qc/queue?limit=20`, token, 200)) as { items: { featureId: string; claim: { holder: string } | null }[] };
      const next = queue.items.find((item) => item.featureId !== current && (item.claim === null || item.claim.holder === 'bench-reviewer'));
      if (!next) throw new Error('the queue ran dry');
      const item = (await call('GET', `${base}/api/qc/items/${next.featureId}`, token, 200)) as { checks: unknown[] };
      if (!Array.isArray(item.checks)) throw new Error('the item has no checks');
      return next.featureId;
    };

    // The desk path works from the head of the queue; the baseline decides items from its tail.
    let current = await prefetchNext(undefined);
    await call('POST', `${base}/api/qc/claim/${current}`, token, 200);
    const tail = ids.slice().reverse();
    const withNext: number[] = [];
    const alone: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const deskRun = async () => {
        const next = await prefetchNext(current);
        withNext.push(
          await timeIt(async () => {
            await call('POST', `${base}/api/qc/approve/${current}`, token, 200);
            await call('POST', `${base}/api/qc/claim/${next}`, token, 200);
          }),
        );
        current = next;
      };
      const aloneRun = async () => {
        const id = tail.shift()!;
        alone.push(await timeIt(() => call('POST', `${base}/api/qc/approve/${id}`, token, 200)));
      };
      if (i % 2 === 0) {
        await deskRun();
        await aloneRun();
      } else {
        await aloneRun();
        await deskRun();
      }
    }
    await reportDecisionToNext(pool, { title: 'decision → next item shown', queue: QUEUE, rounds: ROUNDS, withNext, alone });
  } finally {
    await api?.stop();
    await pool.end();
    await database.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
