import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';
import { readOsmChange } from '../../../test/doubles/osm-change-reader.js';
import { startOsmApiDouble, type OsmApiDouble } from '../../shared/testing/osm-api.js';
import { reviewsOf, startWorker, waitFor, type JobView } from './qc-harness.js';

/**
 * OSM's limits (docs/qc.md "OSM's limits", issue 27), against the OSM API 0.6 double, which closes a
 * changeset at its change limit (409 "was closed") and answers injected 429s with Retry-After:
 * - a 429 with Retry-After: the job is tried again at that time, not before; each try is one
 *   attempt of the job, none of the batch's other members; the refused changeset is closed at once.
 * - a batch over the changeset limit: the 409 splits it into changesets that fit, every feature is
 *   exported (none recorded as conflict), each changeset's comment counts what it holds.
 */
const { db, api } = useTestApi({ queue: true });
let osm: OsmApiDouble;
let small: OsmApiDouble;
let contributor: string;
let reviewer: string;

const env = (url: string, extra: Record<string, string> = {}) => ({
  OSM_API_URL: url,
  OSM_ACCESS_TOKEN: 'test-token',
  // These exports go up without a plan review (docs/qc.md "Nothing reaches OSM unseen"); qc-osm-plan-review.test.ts reviews them.
  OSM_AUTO_UPLOAD_CATEGORIES: 'friedhof,blumenbeet,denkmal',
  EXPORT_USER_AGENT: 'feature-platform-tests/1.0 (qc@example.org)',
  EXPORT_DATA_LICENCE: 'CC0-1.0',
  EXPORT_HTTP_TIMEOUT_MS: '60000',
  OSM_CONFLATION: 'false',
  ...extra,
});

beforeAll(async () => {
  osm = await startOsmApiDouble();
  small = await startOsmApiDouble({ maxChangesetChanges: 40 });
  contributor = await api.tokenFor('contributor', 'conny');
  reviewer = await api.tokenFor('reviewer', 'rita');
});
afterAll(async () => {
  await osm?.close();
  await small?.close();
});

async function approved(name: string, kategorie: string, geometry: unknown): Promise<string> {
  const created = await api.request('POST', '/api/features', { token: contributor, body: aFeature({ geometry, properties: { name, kategorie } }) });
  expect(created.status).toBe(201);
  const id = created.json.id as string;
  expect((await api.request('POST', '/api/qc/submit', { token: contributor, body: { featureId: id } })).status).toBe(200);
  expect((await api.request('POST', `/api/qc/approve/${id}`, { token: reviewer })).status).toBe(200);
  return id;
}
const osmJob = async (id: string): Promise<JobView> => (await reviewsOf(api, id)).jobs.find((j) => j.task === 'osm_export')!;
const allExported = (ids: string[], timeoutMs = 30_000) =>
  waitFor(`the OSM exports of ${ids.length} features`, async () => {
    const jobs = await Promise.all(ids.map(osmJob));
    return jobs.every((j) => j.status === 'exported') ? jobs : undefined;
  }, timeoutMs);

/** A closed ring of `n` vertices around (lon, lat): n nodes and one way, n + 1 changes. */
function polygonOf(lon: number, lat: number, n: number): unknown {
  const ring = Array.from({ length: n }, (_, i) => [lon + 0.0004 * Math.cos((2 * Math.PI * i) / n), lat + 0.0003 * Math.sin((2 * Math.PI * i) / n)]);
  return { type: 'Polygon', coordinates: [[...ring, ring[0]]] };
}

describe('429 with Retry-After', () => {
  it('the batch is tried again at Retry-After, not before; one attempt per try for the leader, none for the other member; the refused changeset is closed', async () => {
    const ids = [
      await approved('Retry Eins', 'denkmal', { type: 'Point', coordinates: [11.9601, 51.4801] }),
      await approved('Retry Zwei', 'denkmal', { type: 'Point', coordinates: [11.9605, 51.4803] }),
    ];
    osm.injectFault({ method: 'POST', path: /\/upload$/, mode: 'status', status: 429, headers: { 'retry-after': '3' } });
    const worker = await startWorker(db, env(osm.url));
    try {
      // Refused by one answer, both rows are due at one instant: whichever of their jobs comes first
      // takes the other into its batch again (a member due a few ms before the leader exported alone).
      const due = await waitFor('both rows given back after the 429', async () => {
        const { rows } = await db.pool.query(`SELECT status, not_before FROM qc.jobs WHERE task = 'osm_export' AND feature_id = ANY($1::text[])`, [ids]);
        return rows.length === 2 && rows.every((r) => r.status === 'retrying') ? rows.map((r) => (r.not_before as Date).getTime()) : undefined;
      }, 10_000);
      expect(due[0]).toBe(due[1]);
      const jobs = await allExported(ids);
      const uploads = osm.requests.filter((r) => r.method === 'POST' && r.path.endsWith('/upload'));
      expect(uploads).toHaveLength(2);
      expect(uploads[1]!.at - uploads[0]!.at).toBeGreaterThanOrEqual(3_000);
      expect(uploads[1]!.at - uploads[0]!.at).toBeLessThan(10_000);
      // Two tries, each counted once, for the job that led it (the member may lead the second).
      expect(jobs.reduce((n, j) => n + j.attempts, 0)).toBe(2);
      // Both in one changeset, closed; the refused one is closed and empty; nothing is left open.
      expect(new Set(jobs.map((j) => j.result!.changesetId)).size).toBe(1);
      expect(osm.changesets().filter((c) => c.open)).toEqual([]);
      expect(osm.changesets().filter((c) => c.changes.length === 0 && c.user === 'exporter')).toHaveLength(1);
    } finally {
      await worker.stop();
    }
  });

  it('a job that keeps getting 429 gives up after its own attempts, not after a burst of claims', async () => {
    const id = await approved('Retry Immer', 'denkmal', { type: 'Point', coordinates: [11.9801, 51.4901] });
    await db.pool.query(`UPDATE qc.jobs SET max_attempts = 2 WHERE feature_id = $1::text AND task = 'osm_export'`, [id]);
    osm.injectFault({ method: 'POST', path: /\/upload$/, mode: 'status', status: 429, headers: { 'retry-after': '1' }, times: 5 });
    const started = Date.now();
    const worker = await startWorker(db, env(osm.url));
    try {
      const failed = await waitFor('the export to give up', async () => {
        const job = await osmJob(id);
        return job.status === 'failed' ? job : undefined;
      });
      expect(failed.reason).toMatch(/^gave up after 2 attempts: OSM API changeset upload answered 429/);
      expect(Date.now() - started).toBeGreaterThanOrEqual(1_000);
      expect(osm.changesets().filter((c) => c.open)).toEqual([]);
    } finally {
      await worker.stop();
      osm.injectFault({ method: 'POST', path: /\/upload$/, mode: 'status', status: 429, times: 0 });
    }
  });
});

describe('the changeset limit', () => {
  it('six large polygons over the limit: the 409 splits the batch into changesets that fit, every feature exported, each comment counts its own', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push(await approved(`Gross ${i}`, 'friedhof', polygonOf(12.1 + i * 0.002, 51.5, 10)));
    const worker = await startWorker(db, env(small.url));
    try {
      const jobs = await allExported(ids, 15_000).catch(async (error: Error) => {
        throw new Error(`${error.message}: ${JSON.stringify(await Promise.all(ids.map(osmJob)))}`);
      });
      expect(jobs.every((j) => j.status === 'exported')).toBe(true);
      const used = small.changesets().filter((c) => c.changes.length > 0);
      expect(used.length).toBeGreaterThanOrEqual(2);
      for (const c of used) {
        expect(c.changes.length).toBeLessThanOrEqual(40);
        expect(c.open).toBe(false);
        const ways = c.changes.filter((ch) => ch.element.type === 'way').length;
        expect(c.tags.comment).toMatch(new RegExp(`^${ways === 1 ? 'friedhof' : `${ways} features`}`));
      }
      expect(used.reduce((n, c) => n + c.changes.filter((ch) => ch.element.type === 'way').length, 0)).toBe(6);
      expect(small.changesets().filter((c) => c.open)).toEqual([]);
      // The hourly budget counts these changes: 11 per polygon.
      const changes = await db.pool.query<{ n: number }>(`SELECT sum(osm_changes)::int AS n FROM qc.jobs WHERE feature_id = ANY($1::text[]) AND task = 'osm_export'`, [ids]);
      expect(changes.rows[0]!.n).toBe(66);
      expect(small.acceptedUploads.map((x) => readOsmChange(x).flatMap((b) => b.elements).length).every((n) => n <= 40)).toBe(true);
    } finally {
      await worker.stop();
    }
  });
});

describe('one-to-one matching across exports', () => {
  it('two approvals matching one OSM element with near-equal scores in a batch are both asked; a later one matching an element already another feature\'s is asked too', async () => {
    const nodeId = 88_000_001;
    osm.seed(`<osm version="0.6"><node id="${nodeId}" version="3" lat="51.5101" lon="11.8101"><tag k="historic" v="memorial"/><tag k="name" v="Kriegerdenkmal Kirchberg"/></node></osm>`);
    const ids = [
      await approved('Kriegerdenkmal Kirchberg', 'denkmal', { type: 'Point', coordinates: [11.81012, 51.51011] }),
      await approved('Kriegerdenkmal Kirchberg', 'denkmal', { type: 'Point', coordinates: [11.81005, 51.51008] }),
    ];
    const uploads = osm.acceptedUploads.length;
    const worker = await startWorker(db, env(osm.url, { OSM_CONFLATION: 'true' }));
    try {
      const asked = await waitFor('both exports to ask', async () => {
        const jobs = await Promise.all(ids.map(osmJob));
        return jobs.every((j) => j.status === 'needs_decision') ? jobs : undefined;
      }).catch(async (error: Error) => {
        throw new Error(`${error.message}: ${JSON.stringify(await Promise.all(ids.map(osmJob)))}`);
      });
      // 1.8 m and 4.1 m from the node: scores 0.988 and 0.973, within the ambiguity margin (0.05).
      for (const job of asked) expect(job.reason).toMatch(new RegExp(`^node ${nodeId} is also the match of feature \\S+ \\(score 0\\.9\\d\\d against 0\\.9\\d\\d, within the ambiguity margin of 0\\.05\\): one element, two features$`));
      expect(osm.acceptedUploads.length).toBe(uploads);
      expect(osm.element('node', nodeId)!.version).toBe(3);

      // An export record already names the element (a reviewer linked the first feature): a third approval is asked.
      await db.pool.query(`INSERT INTO qc.export_records (feature_id, target, record, job_id) VALUES ($1::text, 'osm', $2::jsonb, $3::bigint)`, [ids[0], JSON.stringify({ type: 'node', id: nodeId, version: 3, changesetId: null, linked: true }), asked[0]!.id]);
      const third = await approved('Kriegerdenkmal Kirchberg', 'denkmal', { type: 'Point', coordinates: [11.81015, 51.51013] });
      const job = await waitFor('the third export to ask', async () => {
        const j = await osmJob(third);
        return j.status === 'needs_decision' ? j : undefined;
      });
      expect(job.reason).toBe(`node ${nodeId} is already the OSM element of feature ${ids[0]}: one element, two features`);
      // Nor can a reviewer link it by hand: the element is another feature's (409, nothing uploaded).
      const refused = await api.request('POST', `/api/qc/jobs/${job.id}/decision`, { token: reviewer, body: { choice: { type: 'node', id: nodeId } } });
      expect(refused.status, refused.text).toBe(409);
      expect(refused.json.detail).toContain(`node ${nodeId} is already the OSM element of feature ${ids[0]}`);
      expect(osm.acceptedUploads.length).toBe(uploads);
    } finally {
      await worker.stop();
    }
  });
});
