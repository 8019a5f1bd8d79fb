import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';
import { startSmtpDouble, type SmtpDouble } from '../../shared/testing/smtp.js';
import { relayOutbox } from '../src/qc/jobs/relay.js';
import { reviewsOf, startWorker, waitFor } from './qc-harness.js';

/**
 * A relay round's jobs go to graphile-worker as one batch job per named queue (queries.ts relayJobs)
 * and run together (tasks.ts runJobBatch): started in one statement and recorded in one. Shown here
 * over HTTP, with a real worker and a real SMTP server: three approvals relayed in one round; the
 * agency's mail of one of them is refused once with a transient 451. The other two are recorded at
 * once, and graphile tries the batch again holding only the refused entry, which then arrives, once.
 */
const { db, api } = useTestApi({ queue: true });
let smtp: SmtpDouble;
let worker: Awaited<ReturnType<typeof startWorker>> | undefined;
const tokens: Record<string, string> = {};

beforeAll(async () => {
  smtp = await startSmtpDouble({ deferOnce: (subject) => subject.includes('Batchstein B') });
  for (const [role, sub] of [['contributor', 'bea'], ['reviewer', 'rita']] as const) tokens[sub] = await api.tokenFor(role, sub);
});
afterAll(async () => {
  await worker?.stop();
  await smtp?.stop();
});

/** The graphile jobs holding these QC jobs: identifier, queue, attempts and the QC job ids of its payload. */
async function graphileJobsOf(jobIds: number[]): Promise<{ identifier: string; queue: string | null; attempts: number; entries: number[] }[]> {
  const { rows } = await db.pool.query<{ identifier: string; queue: string | null; attempts: number; entries: string[] }>(
    `SELECT t.identifier, q.queue_name AS queue, j.attempts, array_agg((e.entry->>'jobId')::bigint ORDER BY e.n)::text[] AS entries
     FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id
     LEFT JOIN graphile_worker._private_job_queues q ON q.id = j.job_queue_id
     CROSS JOIN LATERAL json_array_elements(CASE WHEN json_typeof(j.payload) = 'array' THEN j.payload ELSE json_build_array(j.payload) END) WITH ORDINALITY AS e(entry, n)
     WHERE (e.entry->>'jobId')::bigint = ANY($1::bigint[])
     GROUP BY j.id, t.identifier, q.queue_name ORDER BY j.run_at, j.id`,
    [jobIds],
  );
  return rows.map((r) => ({ ...r, entries: r.entries.map(Number) }));
}

describe('a relay round as graphile batch jobs', () => {
  it('three approvals run as one batch per queue; a mail refused once is tried again alone, the others are recorded at once', async () => {
    const ids: string[] = [];
    for (const name of ['Batchstein A', 'Batchstein B', 'Batchstein C']) {
      const created = await api.request('POST', '/api/features', { token: tokens.bea, body: aFeature({ properties: { name, kategorie: 'denkmal' } }) });
      expect(created.status).toBe(201);
      ids.push(created.json.id as string);
      expect((await api.request('POST', '/api/qc/submit', { token: tokens.bea, body: { featureId: created.json.id } })).status).toBe(200);
    }
    await relayOutbox(db.pool); // the reviewers' notices of the submissions, a batch of their own
    const jobs: Record<string, { id: number; task: string }[]> = {};
    for (const id of ids) {
      const approved = await api.request('POST', `/api/qc/approve/${encodeURIComponent(id)}`, { token: tokens.rita });
      expect(approved.status).toBe(200);
      jobs[id] = approved.json.jobs;
    }
    const notices = ids.map((id) => jobs[id]!.find((j) => j.task === 'agency_notice')!.id);
    const exports = ids.flatMap((id) => jobs[id]!.filter((j) => j.task !== 'agency_notice').map((j) => j.id));

    // One relay round: the three agency notices in one batch job in no named queue; each feature's
    // OSM and Wikibase export together, OSM first, in its feature's export queue.
    expect(await relayOutbox(db.pool)).toBe(9);
    const relayed = await graphileJobsOf([...notices, ...exports]);
    expect(relayed.filter((j) => j.queue === null)).toEqual([{ identifier: 'qc_jobs', queue: null, attempts: 0, entries: notices }]);
    const queued = relayed.filter((j) => j.queue !== null);
    expect(queued.every((j) => j.identifier === 'qc_jobs' && /^exports:\d+$/.test(j.queue!))).toBe(true);
    expect(queued.flatMap((j) => j.entries).sort((a, b) => a - b)).toEqual([...exports].sort((a, b) => a - b));
    for (const id of ids) {
      const [osm, wikibase] = jobs[id]!.filter((j) => j.task !== 'agency_notice');
      const holder = queued.find((j) => j.entries.includes(osm!.id))!;
      expect(holder.entries.indexOf(wikibase!.id)).toBe(holder.entries.indexOf(osm!.id) + 1);
    }

    worker = await startWorker(db, { SMTP_URL: smtp.url, MAIL_FROM: 'QC <qc@example.org>', AGENCY_EMAIL: 'amt@example.org' });

    // B's mail was refused (451): B is retrying after its first attempt and graphile holds it alone,
    // for a second attempt with backoff; A and C were sent in that first attempt.
    const [a, b, c] = ids as [string, string, string];
    const agencyJob = async (id: string) => (await reviewsOf(api, id)).jobs.find((j) => j.task === 'agency_notice')!;
    const retrying = await waitFor('B retrying after the 451', async () => {
      const job = await agencyJob(b);
      return job.status === 'retrying' ? job : undefined;
    });
    expect(retrying.attempts).toBe(1);
    for (const id of [a, c]) expect(await agencyJob(id)).toMatchObject({ status: 'sent', attempts: 1 });
    expect(await graphileJobsOf(notices)).toEqual([{ identifier: 'qc_jobs', queue: null, attempts: 1, entries: [notices[1]] }]);

    expect(await waitFor('B sent on its second attempt', async () => {
      const job = await agencyJob(b);
      return job.status === 'sent' ? job : undefined;
    })).toMatchObject({ attempts: 2 });
    await waitFor('the batch job gone', async () => (await graphileJobsOf(notices)).length === 0);
    const subjects = smtp.messages.filter((m) => m.envelope.to.includes('amt@example.org')).map((m) => m.subject).sort();
    expect(subjects).toEqual(ids.map((_, i) => `Feature approved: "Batchstein ${'ABC'[i]}" (version 1)`));

    // The exports to targets that are not configured are recorded as skipped, each after one attempt.
    for (const id of ids) {
      const recorded = (await reviewsOf(api, id)).jobs.filter((j) => j.task === 'osm_export' || j.task === 'wikibase_export');
      expect(recorded.map((j) => [j.task, j.status, j.attempts, j.reason])).toEqual([
        ['osm_export', 'skipped', 1, 'OSM_ACCESS_TOKEN is not set'],
        ['wikibase_export', 'skipped', 1, 'WIKIBASE_URL is not set'],
      ]);
    }
  });

  it('a payload that is not a list of jobs is dropped with an error, and nothing else is touched', async () => {
    const before = await db.pool.query(`SELECT id, status, attempts FROM qc.jobs ORDER BY id`);
    await db.pool.query(`SELECT graphile_worker.add_job('qc_jobs', '[{"jobId": "1; DROP TABLE qc.jobs", "task": "osm_export"}]'::json)`);
    await db.pool.query(`SELECT graphile_worker.add_job('qc_jobs', '{"jobId": 1}'::json)`);
    await waitFor('both run', async () => (await db.pool.query(`SELECT 1 FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id WHERE t.identifier = 'qc_jobs'`)).rowCount === 0);
    expect((await db.pool.query(`SELECT id, status, attempts FROM qc.jobs ORDER BY id`)).rows).toEqual(before.rows);
  });
});
