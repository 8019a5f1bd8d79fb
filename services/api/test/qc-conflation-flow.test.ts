/**
 * The conflation decision flow end to end: approval → the OSM export job finds two candidates and
 * stops with needs_decision → the candidates and the automatic decision are on
 * /api/features/{id}/reviews → a reviewer picks one over HTTP → the job resumes and modifies that
 * element → both decisions stay in the feature's record.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';
import { startMediaWikiDouble, type MediaWikiDouble } from '../../shared/testing/mediawiki-api.js';
import { startOsmApiDouble, type OsmApiDouble } from '../../shared/testing/osm-api.js';
import { startOverpassDouble, type OverpassDouble } from '../../../test/doubles/overpass.js';
import { reviewsOf, startWorker, waitFor } from './qc-harness.js';

const { db, api } = useTestApi({ queue: true });
let osm: OsmApiDouble;
let overpass: OverpassDouble;
let wiki: MediaWikiDouble;
let worker: Awaited<ReturnType<typeof startWorker>>;

beforeAll(async () => {
  [osm, wiki] = await Promise.all([startOsmApiDouble(), startMediaWikiDouble()]);
  overpass = await startOverpassDouble(osm);
  osm.seed(`<osm version="0.6">
    <node id="70000001" version="1" lat="51.3401" lon="12.3801"><tag k="historic" v="memorial"/><tag k="name" v="Kriegerdenkmal"/></node>
    <node id="70000002" version="4" lat="51.34012" lon="12.38013"><tag k="historic" v="monument"/><tag k="name" v="Kriegerdenkmal 1870/71"/><tag k="memorial:type" v="obelisk"/></node>
  </osm>`);
  worker = await startWorker(db, {
    OSM_API_URL: osm.url,
    OSM_ACCESS_TOKEN: 'test-token',
    // These exports go up without a plan review (docs/qc.md "Nothing reaches OSM unseen"); qc-osm-plan-review.test.ts reviews them.
    OSM_AUTO_UPLOAD_CATEGORIES: 'friedhof,blumenbeet,denkmal',
    // The follow-up export writing wikidata= is qc-exports-order.test.ts's subject; here it would add uploads.
    OSM_WIKIDATA_LINK_BACK: 'false',
    OVERPASS_URL: overpass.url,
    WIKIBASE_URL: wiki.url,
    WIKIBASE_USERNAME: 'Exporter@qc',
    WIKIBASE_PASSWORD: 'bot-password-123',
    EXPORT_USER_AGENT: 'feature-platform-tests/1.0',
    EXPORT_DATA_LICENCE: 'CC0-1.0',
    EXPORT_HTTP_TIMEOUT_MS: '5000',
  });
});
afterAll(async () => {
  await worker?.stop();
  await Promise.all([osm?.close(), overpass?.close(), wiki?.close()]);
});

describe('conflation decided by a reviewer', () => {
  it('two candidates → needs_decision with the candidates on the reviews; the reviewer\'s choice resumes the job, recorded with who decided', async () => {
    const contributor = await api.tokenFor('contributor', 'conny');
    const reviewer = await api.tokenFor('reviewer', 'rita');
    const other = await api.tokenFor('reviewer', 'rolf');
    const created = await api.request('POST', '/api/features', { token: contributor, body: aFeature({ geometry: { type: 'Point', coordinates: [12.38011, 51.34011] }, properties: { name: 'Kriegerdenkmal', kategorie: 'denkmal', telefon: '+49 341 5' } }) });
    expect(created.status).toBe(201);
    const id = created.json.id as string;
    expect((await api.request('POST', '/api/qc/submit', { token: contributor, body: { featureId: id } })).status).toBe(200);
    expect((await api.request('POST', `/api/qc/approve/${id}`, { token: reviewer })).status).toBe(200);

    const waiting = await waitFor('the OSM export to wait for a decision', async () => {
      const reviews = await reviewsOf(api, id);
      return reviews.jobs.find((j) => j.task === 'osm_export' && j.status === 'needs_decision');
    });
    expect(waiting.reason).toBe('2 candidates');
    const candidates = (waiting.result as { candidates: { type: string; id: number; name: string; geometry: { type: string } }[] }).candidates;
    expect(candidates.map((c) => c.id).sort()).toEqual([70000001, 70000002]);
    let reviews = (await reviewsOf(api, id)) as unknown as { decisions: Record<string, unknown>[] };
    expect(reviews.decisions.filter((d) => d.target === 'osm')).toMatchObject([{ outcome: 'needs_decision', decidedBy: null, jobId: waiting.id }]);
    // The Wikibase export waits for the OSM export (it reads its link), without a decision of its own
    // yet; before issue 27 it raced ahead and decided while the OSM export waited for the reviewer.
    const wikibaseWaiting = await waitFor('the Wikibase export to wait for the OSM export', async () => (await reviewsOf(api, id)).jobs.find((j) => j.task === 'wikibase_export' && j.reason === 'waits for the OSM export of this approval (needs_decision)'));
    expect(wikibaseWaiting).toMatchObject({ status: 'queued', attempts: 0 });
    expect(((await reviewsOf(api, id)) as unknown as { decisions: Record<string, unknown>[] }).decisions.filter((d) => d.target === 'wikibase')).toEqual([]);
    expect(osm.acceptedUploads).toHaveLength(0);

    // The review desk: reviewers list the conflations waiting for them, with the candidates and the
    // feature; every other job list, and re-running, stays with admins.
    const admin = await api.tokenFor('admin', 'adam');
    const guest = await api.tokenFor('guest', 'gina');
    const list = (token: string | undefined, query = '?status=needs_decision') => api.request('GET', `/api/qc/jobs${query}`, { token });
    expect((await list(undefined)).status).toBe(401);
    expect((await list(guest)).status).toBe(403);
    expect((await list(contributor)).status).toBe(403);
    const listed = await list(other);
    expect(listed.status).toBe(200);
    const listedJob = (listed.json.jobs as { id: number; candidates: { id: number; geometry: unknown }[] }[]).find((j) => j.id === waiting.id);
    expect(listedJob).toMatchObject({ task: 'osm_export', status: 'needs_decision', feature: { name: 'Kriegerdenkmal', kategorie: 'denkmal', geometry: { type: 'Point' } } });
    expect(listedJob!.candidates.map((c) => c.id).sort()).toEqual([70000001, 70000002]);
    expect(listedJob!.candidates.every((c) => c.geometry !== undefined)).toBe(true);
    for (const query of ['', '?status=failed', '?status=needs_decision,conflict']) {
      const refused = await list(other, query);
      expect(refused.status, query).toBe(403);
      expect(refused.json.detail).toMatch(/needs_decision/);
    }
    const adminList = await list(admin, '?status=needs_decision,exported');
    expect(adminList.status).toBe(200);
    expect((adminList.json.jobs as { id: number; candidates: unknown }[]).find((j) => j.id === waiting.id)?.candidates).toHaveLength(2);
    expect((await list(admin, '')).status).toBe(200);
    expect((await api.request('POST', `/api/qc/jobs/${waiting.id}/rerun`, { token: other })).status).toBe(403);
    expect((await api.request('POST', `/api/qc/jobs/${waiting.id}/rerun`, { token: admin })).status).toBe(409);

    // Guards: a contributor may not decide; a choice outside the candidates is refused; nothing changes.
    expect((await api.request('POST', `/api/qc/jobs/${waiting.id}/decision`, { token: contributor, body: { choice: 'create' } })).status).toBe(403);
    const outside = await api.request('POST', `/api/qc/jobs/${waiting.id}/decision`, { token: other, body: { choice: { type: 'node', id: 1 } } });
    expect(outside.status).toBe(400);
    expect(outside.json.detail).toMatch(/not one of the candidates/);

    const decided = await api.request('POST', `/api/qc/jobs/${waiting.id}/decision`, { token: other, body: { choice: { type: 'node', id: 70000002 }, comment: 'the obelisk is the one' } });
    expect(decided.status).toBe(200);
    expect(decided.json).toMatchObject({ id: waiting.id, status: 'queued' });
    // Deciding twice is a state error, not a second decision.
    expect((await api.request('POST', `/api/qc/jobs/${waiting.id}/decision`, { token: other, body: { choice: 'create' } })).status).toBe(409);

    const done = await waitFor('the export to finish after the decision', async () => {
      const r = await reviewsOf(api, id);
      const job = r.jobs.find((j) => j.id === waiting.id);
      return job && ['exported', 'failed', 'conflict'].includes(job.status) ? job : undefined;
    });
    expect(done.status, JSON.stringify(done)).toBe('exported');
    expect(done.result).toMatchObject({ type: 'node', id: 70000002, linked: true });
    expect(osm.element('node', 70000002)!.tags).toEqual({ historic: 'monument', name: 'Kriegerdenkmal 1870/71', 'memorial:type': 'obelisk', phone: '+49 341 5' });
    expect(osm.element('node', 70000001)!.version).toBe(1);
    expect(osm.acceptedUploads).toHaveLength(1);

    reviews = (await reviewsOf(api, id)) as unknown as { decisions: Record<string, unknown>[] };
    const osmDecisions = reviews.decisions.filter((d) => d.target === 'osm');
    expect(osmDecisions).toMatchObject([
      { outcome: 'needs_decision', decidedBy: null },
      { outcome: 'link', chosen: 'node/70000002', decidedBy: 'rolf', reason: 'reviewer chose node 70000002: the obelisk is the one' },
    ]);
    expect((reviews as unknown as { exportRecords: { osm: unknown } }).exportRecords.osm).toMatchObject({ type: 'node', id: 70000002, linked: true });

    // After the OSM export the Wikibase export runs: nothing nearby, so it decides to create an item.
    const wikibaseDecision = await waitFor('the Wikibase conflation decision', async () => ((await reviewsOf(api, id)) as unknown as { decisions: Record<string, unknown>[] }).decisions.find((d) => d.target === 'wikibase'));
    expect(wikibaseDecision).toMatchObject({ outcome: 'create', decidedBy: null });

    // The feature's history shows every decision too, automatic or human, newest first.
    const history = await api.request('GET', `/api/features/${id}/history`);
    expect(history.status).toBe(200);
    const historyDecisions = history.json.decisions as Record<string, unknown>[];
    expect(historyDecisions.filter((d) => d.target === 'osm')).toMatchObject([
      { outcome: 'link', chosen: 'node/70000002', decidedBy: 'rolf', version: 1, jobId: waiting.id },
      { outcome: 'needs_decision', decidedBy: null, version: 1, jobId: waiting.id },
    ]);
    expect(historyDecisions.find((d) => d.target === 'wikibase')).toMatchObject({ outcome: 'create', decidedBy: null, version: 1 });
    expect(historyDecisions.map((d) => d.id)).toEqual([...historyDecisions.map((d) => d.id as number)].sort((a, b) => b - a));
    expect(history.json.versions).toHaveLength(1);
  });
});

describe('OSM edit rate', () => {
  it('over OSM_MAX_EDITS_PER_HOUR an export waits in the queue with the reason, without using up an attempt', async () => {
    await worker.stop();
    worker = await startWorker(db, {
      OSM_API_URL: osm.url,
      OSM_ACCESS_TOKEN: 'test-token',
      // These exports go up without a plan review (docs/qc.md "Nothing reaches OSM unseen"); qc-osm-plan-review.test.ts reviews them.
      OSM_AUTO_UPLOAD_CATEGORIES: 'friedhof,blumenbeet,denkmal',
      // The follow-up export writing wikidata= is qc-exports-order.test.ts's subject; here it would add uploads.
      OSM_WIKIDATA_LINK_BACK: 'false',
      OVERPASS_URL: overpass.url,
      EXPORT_USER_AGENT: 'feature-platform-tests/1.0',
      EXPORT_DATA_LICENCE: 'CC0-1.0',
      // The first test's export counts: one finished in the last hour.
      OSM_MAX_EDITS_PER_HOUR: '1',
    });
    const contributor = await api.tokenFor('contributor', 'conny');
    const reviewer = await api.tokenFor('reviewer', 'rita');
    const created = await api.request('POST', '/api/features', { token: contributor, body: aFeature({ geometry: { type: 'Point', coordinates: [12.2, 51.2] }, properties: { name: 'Gedenkstein am Wege', kategorie: 'denkmal' } }) });
    const id = created.json.id as string;
    await api.request('POST', '/api/qc/submit', { token: contributor, body: { featureId: id } });
    expect((await api.request('POST', `/api/qc/approve/${id}`, { token: reviewer })).status).toBe(200);
    const uploads = osm.acceptedUploads.length;
    const deferred = await waitFor('the OSM export to be deferred', async () => (await reviewsOf(api, id)).jobs.find((j) => j.task === 'osm_export' && j.reason?.startsWith('OSM edit limit of 1 changes per hour reached')));
    expect(deferred).toMatchObject({ status: 'queued', attempts: 0 });
    await new Promise((r) => setTimeout(r, 500));
    expect(osm.acceptedUploads.length).toBe(uploads);
    const waiting = await db.pool.query(`SELECT run_at > now() + interval '50 minutes' AS later FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id WHERE t.identifier = 'qc_osm_export' AND j.payload->>'jobId' = $1::text`, [String(deferred.id)]);
    expect(waiting.rows).toEqual([{ later: true }]);
  });
});
