import { beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';
import { relayOutbox } from '../src/qc/jobs/relay.js';
import { reviewsOf } from './qc-harness.js';

/**
 * The QC state machine over HTTP with every role: draft → in_qc → approved | rejected → (edit) →
 * draft; four-eyes; edits refused while in_qc; concurrent decisions; the trigger for edits that
 * bypass the API; side effects queued in the transition's transaction; admin job re-runs.
 * No worker runs here, so queued jobs stay queued.
 */
const { db, api } = useTestApi({ queue: true });
const token: Record<string, string | undefined> = {};

beforeAll(async () => {
  token.anonymous = undefined;
  token.guest = await api.tokenFor('guest', 'gina');
  token.contributor = await api.tokenFor('contributor', 'conny');
  token.reviewer = await api.tokenFor('reviewer', 'rita');
  token.reviewer2 = await api.tokenFor('reviewer', 'rolf');
  token.admin = await api.tokenFor('admin', 'adam');
});

async function newFeature(owner = 'contributor', properties: Record<string, unknown> = {}): Promise<string> {
  const created = await api.request('POST', '/api/features', { token: token[owner], body: aFeature({ properties }) });
  expect(created.status).toBe(201);
  return created.json.id as string;
}
const submit = (who: string, featureId: string, comment?: string) => api.request('POST', '/api/qc/submit', { token: token[who], body: { featureId, ...(comment ? { comment } : {}) } });
const approve = (who: string, id: string, body?: unknown) => api.request('POST', `/api/qc/approve/${encodeURIComponent(id)}`, { token: token[who], ...(body === undefined ? {} : { body }) });
const reject = (who: string, id: string, body: unknown) => api.request('POST', `/api/qc/reject/${encodeURIComponent(id)}`, { token: token[who], body });
const statusOf = async (id: string) => (await api.request('GET', `/api/features/${id}`)).json.properties.status as string;

/**
 * The graphile jobs of these QC jobs in the order graphile-worker runs them (run_at, then id): a
 * batch job's entries as `<identifier>:<task>` in payload order, a job of its own as its identifier.
 */
async function graphileJobs(featureJobIds: number[]): Promise<string[]> {
  const { rows } = await db.pool.query<{ task: string }>(
    `SELECT t.identifier || coalesce(':' || (e.entry->>'task'), '') AS task
     FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id
     CROSS JOIN LATERAL json_array_elements(CASE WHEN json_typeof(j.payload) = 'array' THEN j.payload ELSE json_build_array(NULL) END) WITH ORDINALITY AS e(entry, n)
     WHERE coalesce((e.entry->>'jobId')::bigint, (j.payload->>'jobId')::bigint) = ANY($1::bigint[]) ORDER BY j.run_at, j.id, e.n`,
    [featureJobIds],
  );
  return rows.map((r) => r.task);
}

describe('QC state machine over HTTP', () => {
  it('walks draft → in_qc → approved → draft (edit) → in_qc → rejected, recording who, when, comment and version', async () => {
    const id = await newFeature();
    expect(await statusOf(id)).toBe('draft');

    expect((await submit('anonymous', id)).status).toBe(401);
    expect((await submit('guest', id)).status).toBe(403);
    const submitted = await submit('contributor', id, 'please check the address');
    expect(submitted.status).toBe(200);
    expect(submitted.json).toMatchObject({ featureId: id, status: 'in_qc', version: 1, transition: { action: 'submit', actor: 'conny', version: 1, comment: 'please check the address' } });
    expect(submitted.json.jobs.map((j: { task: string }) => j.task)).toEqual(['reviewer_notice']);
    // Queued in the same transaction: the job and its outbox row exist as soon as the answer does; the
    // relay turns it into its graphile job, exactly once, and empties the outbox.
    const submitJobs = submitted.json.jobs.map((j: { id: number }) => j.id) as number[];
    const inOutbox = async () => (await db.pool.query(`SELECT job_ids::int[] AS "jobIds" FROM qc.job_outbox WHERE job_ids && $1::bigint[]`, [submitJobs])).rows;
    expect((await db.pool.query(`SELECT task FROM qc.jobs WHERE id = ANY($1::bigint[]) AND status = 'queued'`, [submitJobs])).rows).toEqual([{ task: 'reviewer_notice' }]);
    expect(await inOutbox()).toEqual([{ jobIds: submitJobs }]);
    expect(await graphileJobs(submitJobs)).toEqual([]);
    expect(await relayOutbox(db.pool)).toBeGreaterThanOrEqual(1);
    expect(await graphileJobs(submitJobs)).toEqual(['qc_jobs:reviewer_notice']);
    expect(await inOutbox()).toEqual([]);
    expect(await relayOutbox(db.pool)).toBe(0);
    expect(await graphileJobs(submitJobs)).toEqual(['qc_jobs:reviewer_notice']);

    const fetched = await api.request('GET', `/api/features/${id}`);
    expect(fetched.json.properties).toMatchObject({ status: 'in_qc', version: 1 });
    expect(fetched.headers.get('etag')).toBe('"1"');
    const listed = await api.request('GET', '/api/features?limit=10000');
    expect(listed.json.features.find((f: { id: string }) => f.id === id).properties.status).toBe('in_qc');

    expect((await submit('contributor', id)).status).toBe(409);
    const refusedEdit = await api.request('PUT', `/api/features/${id}`, { token: token.contributor, body: fetched.json });
    expect(refusedEdit.status).toBe(409);
    expect(refusedEdit.headers.get('content-type')).toContain('application/problem+json');
    expect((await api.request('DELETE', `/api/features/${id}`, { token: token.admin })).status).toBe(409);

    expect((await approve('contributor', id)).status).toBe(403);
    expect((await approve('guest', id)).status).toBe(403);
    expect((await approve('anonymous', id)).status).toBe(401);
    const approved = await approve('reviewer', id, { comment: 'looks right' });
    expect(approved.status).toBe(200);
    expect(approved.json).toMatchObject({ status: 'approved', version: 1, transition: { action: 'approve', actor: 'rita', version: 1, comment: 'looks right' } });
    expect(approved.json.jobs.map((j: { task: string }) => j.task)).toEqual(['osm_export', 'wikibase_export', 'agency_notice']);
    const approveJobs = approved.json.jobs.map((j: { id: number }) => j.id) as number[];
    expect(await graphileJobs(approveJobs)).toEqual([]);
    await relayOutbox(db.pool);
    expect(await graphileJobs(approveJobs)).toEqual(['qc_jobs:osm_export', 'qc_jobs:wikibase_export', 'qc_jobs:agency_notice']);
    // Relaying again adds nothing: each job is relayed once.
    await relayOutbox(db.pool);
    expect(await graphileJobs(approveJobs)).toEqual(['qc_jobs:osm_export', 'qc_jobs:wikibase_export', 'qc_jobs:agency_notice']);
    expect((await approve('reviewer', id)).status).toBe(409);
    expect((await reject('reviewer', id, { reason: 'late' })).status).toBe(409);

    // GET-then-PUT round trip: status comes back and is ignored; the edit returns the feature to draft.
    const current = (await api.request('GET', `/api/features/${id}`)).json;
    expect(current.properties.status).toBe('approved');
    current.properties.telefon = '+49 30 1234';
    const edited = await api.request('PUT', `/api/features/${id}`, { token: token.contributor, body: current });
    expect(edited.status).toBe(200);
    expect(edited.json.properties).toMatchObject({ status: 'draft', version: 2, telefon: '+49 30 1234' });

    expect((await submit('contributor', id)).status).toBe(200);
    for (const bad of [{ reason: '' }, { reason: '   ' }, {}, { reason: 'x', extra: 1 }]) {
      const refused = await reject('reviewer', id, bad);
      expect(refused.status, JSON.stringify(bad)).toBe(400);
      expect(refused.json.code).toBe('VALIDATION_FAILED');
    }
    const noBody = await api.request('POST', `/api/qc/reject/${id}`, { token: token.reviewer });
    expect(noBody.status).toBe(400);
    const rejected = await reject('reviewer', id, { reason: 'telephone number is wrong' });
    expect(rejected.status).toBe(200);
    expect(rejected.json).toMatchObject({ status: 'rejected', version: 2, jobs: [] });

    const reviews = await reviewsOf(api, id);
    expect(reviews.status).toBe('rejected');
    expect(reviews.transitions.map((t) => [t.action, t.fromStatus, t.toStatus, t.version, t.actor])).toEqual([
      ['submit', 'draft', 'in_qc', 1, 'conny'],
      ['approve', 'in_qc', 'approved', 1, 'rita'],
      ['reopen', 'approved', 'draft', 2, 'conny'],
      ['submit', 'draft', 'in_qc', 2, 'conny'],
      ['reject', 'in_qc', 'rejected', 2, 'rita'],
    ]);
    expect(reviews.transitions[4]!.comment).toBe('telephone number is wrong');
    for (const t of reviews.transitions) expect(Number.isNaN(Date.parse(String(t.at)))).toBe(false);
    expect(reviews.jobs.map((j) => [j.task, j.version, j.status])).toEqual([
      ['reviewer_notice', 1, 'queued'],
      ['osm_export', 1, 'queued'],
      ['wikibase_export', 1, 'queued'],
      ['agency_notice', 1, 'queued'],
      ['reviewer_notice', 2, 'queued'],
    ]);

    // A rejected feature can be submitted again without an edit.
    expect((await submit('contributor', id)).status).toBe(200);
    // History keeps data versions only: the status changes did not create versions.
    const history = await api.request('GET', `/api/features/${id}/history`);
    expect(history.json.versions.map((v: { version: number }) => v.version)).toEqual([2, 1]);
  });

  it('the queue lists waiting items oldest first, for reviewers and admins only', async () => {
    const first = await newFeature('contributor', { name: 'Erstes Denkmal', kategorie: 'denkmal' });
    const second = await newFeature('contributor', { name: 'Zweites Beet', kategorie: 'blumenbeet' });
    await submit('contributor', first, 'first');
    await submit('contributor', second);
    expect((await api.request('GET', '/api/qc/queue')).status).toBe(401);
    expect((await api.request('GET', '/api/qc/queue', { token: token.guest })).status).toBe(403);
    expect((await api.request('GET', '/api/qc/queue', { token: token.contributor })).status).toBe(403);
    expect((await api.request('GET', '/api/qc/queue', { token: token.admin })).status).toBe(200);
    const queue = await api.request('GET', '/api/qc/queue', { token: token.reviewer });
    expect(queue.status).toBe(200);
    const items = queue.json.items as Record<string, unknown>[];
    const ours = items.filter((i) => i.featureId === first || i.featureId === second);
    expect(ours).toEqual([
      expect.objectContaining({ featureId: first, version: 1, name: 'Erstes Denkmal', kategorie: 'denkmal', submitter: 'conny', comment: 'first' }),
      expect.objectContaining({ featureId: second, version: 1, name: 'Zweites Beet', kategorie: 'blumenbeet', submitter: 'conny', comment: null }),
    ]);
    const times = items.map((i) => Date.parse(String(i.submittedAt)));
    expect([...times].sort((a, b) => a - b)).toEqual(times);
    await approve('reviewer', first);
    const after = await api.request('GET', '/api/qc/queue', { token: token.reviewer });
    expect(after.json.items.some((i: { featureId: string }) => i.featureId === first)).toBe(false);
  });

  it('four-eyes: a reviewer cannot approve or reject its own submission; another reviewer and an admin can', async () => {
    const own = await newFeature('reviewer');
    expect((await submit('reviewer', own)).status).toBe(200);
    const self = await approve('reviewer', own);
    expect(self.status).toBe(403);
    expect(self.json.code).toBe('FORBIDDEN');
    expect((await reject('reviewer', own, { reason: 'mine' })).status).toBe(403);
    expect(await statusOf(own)).toBe('in_qc');
    expect((await approve('reviewer2', own)).status).toBe(200);

    const adminsOwn = await newFeature('admin');
    expect((await submit('admin', adminsOwn)).status).toBe(200);
    expect((await approve('admin', adminsOwn)).status).toBe(200);
  });

  it('an unknown feature is 404 FEATURE_NOT_FOUND as problem+json on every QC endpoint', async () => {
    for (const response of [
      await submit('contributor', 'no-such-feature'),
      await approve('reviewer', 'no-such-feature'),
      await reject('reviewer', 'no-such-feature', { reason: 'x' }),
      await api.request('GET', '/api/features/no-such-feature/reviews'),
    ]) {
      expect(response.status).toBe(404);
      expect(response.json.code).toBe('FEATURE_NOT_FOUND');
      expect(response.headers.get('content-type')).toContain('application/problem+json');
    }
    const invalid = await api.request('POST', '/api/qc/submit', { token: token.contributor, body: { featureId: 'x', comment: 'c'.repeat(4001) } });
    expect(invalid.status).toBe(400);
    expect((await api.request('POST', '/api/qc/submit', { token: token.contributor, body: { feature: 'x' } })).status).toBe(400);
  });

  it('concurrent approve and reject of one feature: exactly one wins, the other gets 409', async () => {
    for (let round = 0; round < 5; round++) {
      const id = await newFeature();
      await submit('contributor', id);
      const [a, r] = await Promise.all([approve('reviewer', id), reject('reviewer2', id, { reason: 'no' })]);
      expect([a.status, r.status].sort()).toEqual([200, 409]);
      const winner = a.status === 200 ? 'approved' : 'rejected';
      expect(await statusOf(id)).toBe(winner);
      const decisions = (await reviewsOf(api, id)).transitions.filter((t) => t.action === 'approve' || t.action === 'reject');
      expect(decisions).toHaveLength(1);
      const jobs = (await reviewsOf(api, id)).jobs.filter((j) => j.task !== 'reviewer_notice');
      expect(jobs).toHaveLength(winner === 'approved' ? 3 : 0);
    }
  });

  it('an edit that bypasses the API (direct SQL) returns an approved or in_qc feature to draft', async () => {
    const id = await newFeature();
    await submit('contributor', id);
    await approve('reviewer', id);
    await db.pool.query(`UPDATE features.features SET name = 'Umbenannt per SQL' WHERE id = $1`, [id]);
    const feature = (await api.request('GET', `/api/features/${id}`)).json;
    expect(feature.properties).toMatchObject({ status: 'draft', version: 2, name: 'Umbenannt per SQL' });
    const reopen = (await reviewsOf(api, id)).transitions.at(-1)!;
    expect(reopen).toMatchObject({ action: 'reopen', fromStatus: 'approved', toStatus: 'draft', version: 2 });

    await submit('contributor', id);
    await db.pool.query(`UPDATE features.features SET geom = ST_SetSRID(ST_MakePoint(13.5, 52.6), 4326) WHERE id = $1`, [id]);
    expect(await statusOf(id)).toBe('draft');
    expect((await approve('reviewer', id)).status).toBe(409);

    // A status-only change is no new version, and a no-op write changes nothing about the state.
    await db.pool.query(`UPDATE features.features SET status = 'rejected' WHERE id = $1`, [id]);
    const after = (await api.request('GET', `/api/features/${id}`)).json.properties;
    expect(after).toMatchObject({ status: 'rejected', version: 3 });
    await expect(db.pool.query(`UPDATE features.features SET status = 'published' WHERE id = $1`, [id])).rejects.toThrow(/features_status_check/);
  });

  it('admins list jobs that need attention and re-run one; others may not', async () => {
    const id = await newFeature();
    await submit('contributor', id);
    const approved = await approve('reviewer', id);
    const osmJob = approved.json.jobs.find((j: { task: string }) => j.task === 'osm_export').id as number;
    await relayOutbox(db.pool);

    expect((await api.request('GET', '/api/qc/jobs')).status).toBe(401);
    expect((await api.request('GET', '/api/qc/jobs', { token: token.reviewer })).status).toBe(403);
    expect((await api.request('POST', `/api/qc/jobs/${osmJob}/rerun`, { token: token.reviewer })).status).toBe(403);
    expect((await api.request('POST', `/api/qc/jobs/${osmJob}/rerun`, { token: token.admin })).status).toBe(409); // still queued

    await db.pool.query(`UPDATE qc.jobs SET status = 'conflict', reason = 'OSM answered 409' WHERE id = $1`, [osmJob]);
    const list = await api.request('GET', '/api/qc/jobs?status=conflict,failed', { token: token.admin });
    expect(list.status).toBe(200);
    expect(list.json.jobs).toEqual(expect.arrayContaining([expect.objectContaining({ id: osmJob, status: 'conflict', reason: 'OSM answered 409', featureId: id })]));
    expect((await api.request('GET', '/api/qc/jobs?status=bogus', { token: token.admin })).status).toBe(400);

    const rerun = await api.request('POST', `/api/qc/jobs/${osmJob}/rerun`, { token: token.admin });
    expect(rerun.status).toBe(200);
    expect(rerun.json).toMatchObject({ id: osmJob, status: 'queued', reruns: 1, rerunBy: 'adam', reason: null });
    await relayOutbox(db.pool);
    expect(await graphileJobs([osmJob])).toEqual(['qc_jobs:osm_export', 'qc_jobs:osm_export']);
    expect((await api.request('POST', '/api/qc/jobs/999999/rerun', { token: token.admin })).status).toBe(404);
    expect((await api.request('POST', '/api/qc/jobs/abc/rerun', { token: token.admin })).status).toBe(404);
  });

  it('an approval whose transaction rolls back leaves no job: nothing in the outbox, nothing relayed', async () => {
    const id = await newFeature();
    await submit('contributor', id);
    await relayOutbox(db.pool);
    // A fault injected after the jobs are written, inside the approval's statement: the whole
    // transaction rolls back.
    await db.pool.query(`CREATE OR REPLACE FUNCTION public.test_refuse_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'injected fault after the jobs were written'; END $$`);
    await db.pool.query(`CREATE TRIGGER test_refuse_jobs AFTER INSERT ON qc.jobs FOR EACH ROW WHEN (NEW.feature_id = '${id.replace(/'/g, "''")}') EXECUTE FUNCTION public.test_refuse_jobs()`);
    try {
      const refused = await approve('reviewer', id);
      expect(refused.status).toBeGreaterThanOrEqual(400);
    } finally {
      await db.pool.query(`DROP TRIGGER test_refuse_jobs ON qc.jobs`);
    }
    expect(await statusOf(id)).toBe('in_qc');
    expect((await db.pool.query(`SELECT count(*)::int AS n FROM qc.jobs WHERE feature_id = $1`, [id])).rows).toEqual([{ n: 1 }]); // the submit's notice only
    expect((await db.pool.query(`SELECT count(*)::int AS n FROM qc.transitions WHERE feature_id = $1 AND action = 'approve'`, [id])).rows).toEqual([{ n: 0 }]);
    expect(await relayOutbox(db.pool)).toBe(0);
    const graphile = await db.pool.query(`SELECT count(*)::int AS n FROM graphile_worker._private_jobs j
      CROSS JOIN LATERAL json_array_elements(CASE WHEN json_typeof(j.payload) = 'array' THEN j.payload ELSE json_build_array(j.payload) END) e
      JOIN qc.jobs q ON q.id = (e->>'jobId')::bigint WHERE q.feature_id = $1 AND q.task <> 'reviewer_notice'`, [id]);
    expect(graphile.rows).toEqual([{ n: 0 }]);

    // The same approval without the fault queues its three jobs.
    const approved = await approve('reviewer', id);
    expect(approved.status).toBe(200);
    expect(await relayOutbox(db.pool)).toBe(3);
  });

  it('the OpenAPI document describes every QC endpoint', async () => {
    const doc = (await api.request('GET', '/api/openapi.json')).json;
    for (const path of ['/api/qc/submit', '/api/qc/queue', '/api/qc/approve/{id}', '/api/qc/reject/{id}', '/api/features/{id}/reviews', '/api/qc/jobs', '/api/qc/jobs/{id}/rerun']) {
      expect(doc.paths[path], path).toBeDefined();
    }
    expect(doc.paths['/api/qc/reject/{id}'].post.responses['409']).toBeDefined();
  });
});
