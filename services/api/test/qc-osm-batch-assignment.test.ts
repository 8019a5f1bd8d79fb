/**
 * OSM export batches through the API and the worker, against the OSM API 0.6 double:
 * - one-to-one by score across a batch (exports/conflation/assignment.ts): the better match of two
 *   approvals gets the element, the other waits for a reviewer; an element a plan on the desk is
 *   about is held for that feature; a journaled automatic link to an element another feature holds
 *   by now is asked;
 * - a batch split over changesets (the configured limit, or OSM closing a full changeset) creates
 *   each shared node once: a later changeset references the nodes an earlier one created.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';
import { startOsmApiDouble, type OsmApiDouble, type StoredElement } from '../../shared/testing/osm-api.js';
import { reviewsOf, startWorker, waitFor, type JobView } from './qc-harness.js';
import { insertDecision } from '../src/qc/jobs/journal.js';

const { db, api } = useTestApi({ queue: true });
let contributor: string;
let reviewer: string;
const doubles: OsmApiDouble[] = [];

const env = (url: string, extra: Record<string, string> = {}) => ({
  OSM_API_URL: url,
  OSM_ACCESS_TOKEN: 'test-token',
  OSM_AUTO_UPLOAD_CATEGORIES: 'friedhof,blumenbeet,denkmal',
  OSM_WIKIDATA_LINK_BACK: 'false',
  EXPORT_USER_AGENT: 'feature-platform-tests/1.0 (qc@example.org)',
  EXPORT_DATA_LICENCE: 'CC0-1.0',
  EXPORT_HTTP_TIMEOUT_MS: '60000',
  ...extra,
});

beforeAll(async () => {
  contributor = await api.tokenFor('contributor', 'conny');
  reviewer = await api.tokenFor('reviewer', 'rita');
});
afterAll(async () => {
  await Promise.all(doubles.map((d) => d.close()));
});

async function osmDouble(options: Parameters<typeof startOsmApiDouble>[0] = {}): Promise<OsmApiDouble> {
  const d = await startOsmApiDouble(options);
  doubles.push(d);
  return d;
}

async function approved(name: string, kategorie: string, geometry: unknown, telefon?: string): Promise<string> {
  const created = await api.request('POST', '/api/features', { token: contributor, body: aFeature({ geometry, properties: { name, kategorie, ...(telefon ? { telefon } : {}) } }) });
  expect(created.status).toBe(201);
  const id = created.json.id as string;
  expect((await api.request('POST', '/api/qc/submit', { token: contributor, body: { featureId: id } })).status).toBe(200);
  expect((await api.request('POST', `/api/qc/approve/${id}`, { token: reviewer })).status).toBe(200);
  return id;
}
const osmJob = async (id: string): Promise<JobView> => (await reviewsOf(api, id)).jobs.find((j) => j.task === 'osm_export')!;
const settled = (ids: string[], done: (jobs: JobView[]) => boolean, what: string) =>
  waitFor(what, async () => {
    const jobs = await Promise.all(ids.map(osmJob));
    return done(jobs) ? jobs : undefined;
  }).catch(async (error: Error) => {
    throw new Error(`${error.message}: ${JSON.stringify(await Promise.all(ids.map(osmJob)))}`);
  });

/** Metres east / north of (lon, lat) near 51.5°. */
const offset = (lon: number, lat: number, east: number, north = 0): [number, number] => [lon + east / (111_320 * Math.cos((51.5 * Math.PI) / 180)), lat + north / 110_574];

describe('one-to-one by score across a batch', () => {
  it('two approvals near one element: the nearer one is merged into it, the other waits for a reviewer; the element is changed once', async () => {
    const osm = await osmDouble();
    const nodeId = 91_000_001;
    const [lon, lat] = [11.7001, 51.5201];
    osm.seed(`<osm version="0.6"><node id="${nodeId}" version="2" lat="${lat}" lon="${lon}"><tag k="historic" v="memorial"/><tag k="name" v="Kriegerdenkmal Kirchberg"/></node></osm>`);
    // Approved in this order: the far one first, which first-come would have merged.
    const far = await approved('Kriegerdenkmal Kirchberg', 'denkmal', { type: 'Point', coordinates: offset(lon, lat, 15) }, '+49 345 1500');
    const near = await approved('Kriegerdenkmal Kirchberg', 'denkmal', { type: 'Point', coordinates: offset(lon, lat, 1) }, '+49 345 100');
    const worker = await startWorker(db, env(osm.url));
    try {
      const [farJob, nearJob] = await settled([far, near], (jobs) => jobs[0]!.status === 'needs_decision' && jobs[1]!.status === 'exported', 'the near export merged and the far one asked');
      expect(nearJob!.result).toMatchObject({ type: 'node', id: nodeId, linked: true });
      expect(farJob!.reason).toMatch(new RegExp(`^node ${nodeId} is the better match of feature ${near} \\(score 0\\.99\\d against 0\\.9\\d\\d\\): one element, two features$`));
      const node = osm.element('node', nodeId)!;
      expect(node.version).toBe(3);
      expect(node.tags.phone).toBe('+49 345 100');
      expect(osm.visible('node').filter((n) => n.tags.name === 'Kriegerdenkmal Kirchberg')).toHaveLength(1);
    } finally {
      await worker.stop();
    }
  });

  it('an element a plan on the desk would modify is held for that feature: a later approval at it is asked, not planned onto it too', async () => {
    const osm = await osmDouble();
    const nodeId = 91_000_002;
    const [lon, lat] = [11.7201, 51.5301];
    osm.seed(`<osm version="0.6"><node id="${nodeId}" version="1" lat="${lat}" lon="${lon}"><tag k="historic" v="memorial"/><tag k="name" v="Gedenkstein Linde"/></node></osm>`);
    // Every plan waits for a reviewer here.
    const worker = await startWorker(db, env(osm.url, { OSM_AUTO_UPLOAD_CATEGORIES: '' }));
    try {
      const first = await approved('Gedenkstein Linde', 'denkmal', { type: 'Point', coordinates: offset(lon, lat, 2) }, '+49 345 200');
      const [waiting] = await settled([first], (jobs) => jobs[0]!.status === 'needs_decision', 'the first plan on the desk');
      expect(waiting!.reason).toMatch(new RegExp(`^the plan awaits a reviewer: modify node ${nodeId}, \\d+ tag changes?$`));
      const second = await approved('Gedenkstein Linde', 'denkmal', { type: 'Point', coordinates: offset(lon, lat, 0) });
      const [asked] = await settled([second], (jobs) => jobs[0]!.status === 'needs_decision', 'the second export to ask');
      expect(asked!.reason).toBe(`node ${nodeId} is already the OSM element of feature ${first}: one element, two features`);
      expect(osm.acceptedUploads).toHaveLength(0);
    } finally {
      await worker.stop();
    }
  });

  it('an automatic link journaled by an earlier attempt is asked when another feature holds the element by now', async () => {
    const osm = await osmDouble();
    const nodeId = 91_000_003;
    const [lon, lat] = [11.7401, 51.5401];
    osm.seed(`<osm version="0.6"><node id="${nodeId}" version="1" lat="${lat}" lon="${lon}"><tag k="historic" v="memorial"/><tag k="name" v="Bismarckstein"/></node></osm>`);
    const late = await approved('Bismarckstein', 'denkmal', { type: 'Point', coordinates: offset(lon, lat, 1) }, '+49 345 300');
    const job = await osmJob(late);
    // An earlier attempt decided the link (and was then deferred); meanwhile a reviewer linked
    // another feature to the same node and it was exported.
    await insertDecision(db.pool, job.id, 'osm', { outcome: 'link', target: { type: 'node', id: nodeId }, moveGeometry: false, reason: 'one strong candidate', candidates: [], decidedBy: null }, `node/${nodeId}`);
    const other = await approved('Bismarck-Stein', 'denkmal', { type: 'Point', coordinates: offset(lon, lat, 0.5) });
    const otherJob = await osmJob(other);
    await db.pool.query(`UPDATE qc.jobs SET status = 'exported', finished_at = now() WHERE id = $1::bigint`, [otherJob.id]);
    await db.pool.query(`INSERT INTO qc.export_records (feature_id, target, record, job_id) VALUES ($1::text, 'osm', $2::jsonb, $3::bigint)`, [other, JSON.stringify({ type: 'node', id: nodeId, version: 1, changesetId: null, linked: true }), otherJob.id]);
    const worker = await startWorker(db, env(osm.url));
    try {
      const [asked] = await settled([late], (jobs) => jobs[0]!.status === 'needs_decision', 'the journaled link to be asked');
      expect(asked!.reason).toBe(`node ${nodeId} is already the OSM element of feature ${other}: one element, two features`);
      expect(osm.element('node', nodeId)!.version).toBe(1);
    } finally {
      await worker.stop();
    }
  });
});

/**
 * Two areas sharing an edge (its two corners), each a ring of ten vertices: 11 changes each, 20
 * together (the two shared corners once).
 */
function neighbours(lon: number, lat: number): [unknown, unknown] {
  const south: [number, number] = [lon, lat];
  const north: [number, number] = [lon, lat + 0.001];
  const half = (side: 1 | -1) =>
    Array.from({ length: 8 }, (_, i) => {
      const a = -Math.PI / 2 + ((i + 1) * Math.PI) / 9;
      return [lon + side * 0.0008 * Math.cos(a), lat + 0.0005 + 0.0005 * Math.sin(a)] as [number, number];
    });
  const west = [south, ...half(-1), north, south];
  const east = [north, ...half(1).reverse(), south, north];
  return [{ type: 'Polygon', coordinates: [west] }, { type: 'Polygon', coordinates: [east] }];
}

function expectSharedOnce(osm: OsmApiDouble, jobs: JobView[]): void {
  const ways = jobs.map((j) => osm.element('way', (j.result as { id: number }).id)!);
  expect(ways.every((w) => w.type === 'way' && w.nodes!.length === 11)).toBe(true);
  const [a, b] = ways.map((w) => new Set(w.nodes));
  expect([...a!].filter((n) => b!.has(n))).toHaveLength(2);
  // No two nodes of the two areas at one position: 18 distinct corners, 18 nodes.
  const nodes = [...new Set([...a!, ...b!])].map((n) => osm.element('node', n)!) as StoredElement[];
  expect(nodes).toHaveLength(18);
  expect(new Set(nodes.map((n) => `${n.lat!.toFixed(7)},${n.lon!.toFixed(7)}`)).size).toBe(18);
}

describe('a batch split over changesets', () => {
  it('over OSM_MAX_CHANGES_PER_CHANGESET: the second changeset references the corners the first created instead of creating them again', async () => {
    const osm = await osmDouble();
    const [west, east] = neighbours(11.74, 51.54);
    const ids: [string, string] = [await approved('Friedhof West', 'friedhof', west), await approved('Friedhof Ost', 'friedhof', east)];
    const worker = await startWorker(db, env(osm.url, { OSM_CONFLATION: 'false', OSM_MAX_CHANGES_PER_CHANGESET: '15' }));
    try {
      const jobs = await settled(ids, (js) => js.every((j) => j.status === 'exported'), 'both areas exported');
      const used = osm.changesets().filter((c) => c.changes.length > 0);
      expect(used.map((c) => c.changes.length)).toEqual([11, 9]);
      expect(used.every((c) => !c.open)).toBe(true);
      expectSharedOnce(osm, jobs);
    } finally {
      await worker.stop();
    }
  });

  it('OSM closes the full changeset (409): the retry in two changesets creates the shared corners once', async () => {
    const osm = await osmDouble({ maxChangesetChanges: 15 });
    const [west, east] = neighbours(11.76, 51.55);
    const ids: [string, string] = [await approved('Friedhof Nord', 'friedhof', west), await approved('Friedhof Süd', 'friedhof', east)];
    const worker = await startWorker(db, env(osm.url, { OSM_CONFLATION: 'false' }));
    try {
      const jobs = await settled(ids, (js) => js.every((j) => j.status === 'exported'), 'both areas exported');
      // The refused upload left its changeset empty (and closed); the two retries hold 11 and 9.
      expect(osm.changesets().map((c) => c.changes.length)).toEqual([0, 11, 9]);
      expect(osm.changesets().every((c) => !c.open)).toBe(true);
      expectSharedOnce(osm, jobs);
    } finally {
      await worker.stop();
    }
  });
});
