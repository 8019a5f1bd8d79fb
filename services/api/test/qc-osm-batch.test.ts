import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';
import { readOsmChange } from '../../../test/doubles/osm-change-reader.js';
import { startOsmApiDouble, type OsmApiDouble } from '../../shared/testing/osm-api.js';
import { exitOf, reviewsOf, startWorker, startWorkerProcess, waitFor, type JobView } from './qc-harness.js';

/**
 * One changeset per batch of nearby approvals (docs/qc.md, "Changesets"), against the OSM API 0.6
 * double: approvals made while no worker runs are exported together — one changeset, one osmChange —
 * while a far one gets its own; the hourly edit limit caps a batch; and a worker process killed with
 * SIGKILL after OSM applied the batch's upload but before it answered exports every feature of the
 * batch exactly once: the next worker reads the changeset back and finds each feature's elements.
 */
const { db, api } = useTestApi({ queue: true });
let osm: OsmApiDouble;
let contributor: string;
let reviewer: string;
const children: ChildProcess[] = [];

const WORKER_ENV = {
  OSM_API_URL: '',
  OSM_ACCESS_TOKEN: 'test-token',
  // These exports go up without a plan review (docs/qc.md "Nothing reaches OSM unseen"); qc-osm-plan-review.test.ts reviews them.
  OSM_AUTO_UPLOAD_CATEGORIES: 'friedhof,blumenbeet,denkmal',
  EXPORT_USER_AGENT: 'feature-platform-tests/1.0',
  EXPORT_DATA_LICENCE: 'CC0-1.0',
  EXPORT_HTTP_TIMEOUT_MS: '60000',
  OSM_CHANGESET_HASHTAGS: '#leipzig-import',
};

beforeAll(async () => {
  osm = await startOsmApiDouble();
  WORKER_ENV.OSM_API_URL = osm.url;
  contributor = await api.tokenFor('contributor', 'conny');
  reviewer = await api.tokenFor('reviewer', 'rita');
});
afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await osm?.close();
});

/** Create, submit and approve; no worker runs, so the exports wait in the queue. */
async function approved(name: string, kategorie: string, geometry: unknown): Promise<string> {
  const created = await api.request('POST', '/api/features', { token: contributor, body: aFeature({ geometry, properties: { name, kategorie } }) });
  expect(created.status).toBe(201);
  const id = created.json.id as string;
  expect((await api.request('POST', '/api/qc/submit', { token: contributor, body: { featureId: id } })).status).toBe(200);
  expect((await api.request('POST', `/api/qc/approve/${id}`, { token: reviewer })).status).toBe(200);
  return id;
}

const osmJob = async (id: string): Promise<JobView> => (await reviewsOf(api, id)).jobs.find((j) => j.task === 'osm_export')!;
const exported = (ids: string[], timeoutMs = 30_000) =>
  waitFor(`the OSM exports of ${ids.length} features`, async () => {
    const jobs = await Promise.all(ids.map(osmJob));
    return jobs.every((j) => j.status === 'exported') ? jobs : undefined;
  }, timeoutMs);
const uploadsNaming = (name: string) => osm.acceptedUploads.filter((xml) => readOsmChange(xml).some((b) => b.elements.some((e) => e.tags.name === name)));
const taggedElements = (name: string) => [...osm.visible('node'), ...osm.visible('way'), ...osm.visible('relation')].filter((e) => e.tags.name === name);

describe('one changeset per batch of nearby approvals', () => {
  it('nearby approvals go up in one changeset and one upload, each feature recorded with its own element; a far one gets its own changeset', async () => {
    // Within a few hundred metres of each other in Leipzig's south cemetery, and one in Dresden.
    const nearby = [
      { name: 'Batch Grabfeld Nord', kategorie: 'friedhof', geometry: { type: 'Point', coordinates: [12.3921, 51.3195] } },
      { name: 'Batch Gedenkstein', kategorie: 'denkmal', geometry: { type: 'Point', coordinates: [12.3935, 51.3201] } },
      { name: 'Batch Rosenbeet', kategorie: 'blumenbeet', geometry: { type: 'Polygon', coordinates: [[[12.3940, 51.3180], [12.3944, 51.3180], [12.3944, 51.3183], [12.3940, 51.3180]]] } },
      { name: 'Batch Kapellenweg', kategorie: 'denkmal', geometry: { type: 'LineString', coordinates: [[12.3950, 51.3190], [12.3960, 51.3192]] } },
    ];
    const ids: string[] = [];
    for (const f of nearby) ids.push(await approved(f.name, f.kategorie, f.geometry));
    const far = await approved('Batch Elbwiesen-Denkmal', 'denkmal', { type: 'Point', coordinates: [13.7373, 51.0504] });
    const uploadsBefore = osm.acceptedUploads.length;

    const worker = await startWorker(db, WORKER_ENV);
    try {
      const jobs = await exported([...ids, far]);
      const nearJobs = jobs.slice(0, nearby.length);
      const farJob = jobs[nearby.length]!;

      // One changeset for the four, another for the far one; two uploads in all.
      expect(osm.acceptedUploads.length - uploadsBefore).toBe(2);
      const changesetIds = new Set(nearJobs.map((j) => j.result!.changesetId));
      expect(changesetIds.size).toBe(1);
      const batchChangeset = [...changesetIds][0] as number;
      expect(farJob.result!.changesetId).not.toBe(batchChangeset);
      for (const f of nearby) expect(uploadsNaming(f.name), f.name).toEqual(uploadsNaming(nearby[0]!.name));
      expect(uploadsNaming(nearby[0]!.name)).toHaveLength(1);

      // The import conventions on the batch's changeset, closed after the upload.
      const changeset = osm.changeset(batchChangeset)!;
      expect(changeset.open).toBe(false);
      expect(changeset.tags).toMatchObject({ import: 'yes', hashtags: '#leipzig-import', created_by: 'feature-platform-tests/1.0', source: 'municipal feature register (city feature platform)' });
      expect(changeset.tags.comment).toBe('4 features (blumenbeet, denkmal, friedhof) from the city feature platform #leipzig-import');
      expect(osm.changeset(farJob.result!.changesetId as number)!.tags.comment).toMatch(/^denkmal "Batch Elbwiesen-Denkmal"/);

      // Each feature has exactly one element carrying its name, and its record points at it.
      for (const [i, f] of nearby.entries()) {
        const [element] = taggedElements(f.name);
        expect(taggedElements(f.name), f.name).toHaveLength(1);
        expect(nearJobs[i]!.result).toMatchObject({ type: element!.type, id: element!.id, version: element!.version, changesetId: batchChangeset });
        expect((await reviewsOf(api, ids[i]!)).exportRecords.osm).toMatchObject({ type: element!.type, id: element!.id });
      }
      const batches = await db.pool.query<{ jobs: number; changesetId: string }>(`SELECT cardinality(job_ids) AS jobs, changeset_id AS "changesetId" FROM qc.osm_batches WHERE changeset_id = $1::bigint`, [batchChangeset]);
      expect(batches.rows).toEqual([{ jobs: 4, changesetId: String(batchChangeset) }]);
    } finally {
      await worker.stop();
    }
  });

  it('two features drawn edge to edge in one batch share the nodes of their common vertices (no duplicated nodes)', async () => {
    // Two flower beds side by side: the east edge of one is the west edge of the other.
    const a = [[12.3501, 51.3301], [12.3503, 51.3301], [12.3503, 51.3302], [12.3501, 51.3302], [12.3501, 51.3301]];
    const b = [[12.3503, 51.3301], [12.3505, 51.3301], [12.3505, 51.3302], [12.3503, 51.3302], [12.3503, 51.3301]];
    const ids = [await approved('Beet West', 'blumenbeet', { type: 'Polygon', coordinates: [a] }), await approved('Beet Ost', 'blumenbeet', { type: 'Polygon', coordinates: [b] })];
    const nodesBefore = osm.visible('node').length;
    const uploadsBefore = osm.acceptedUploads.length;
    const worker = await startWorker(db, WORKER_ENV);
    try {
      const jobs = await exported(ids);
      expect(osm.acceptedUploads.length - uploadsBefore).toBe(1);
      // Six corners in all, two of them shared.
      expect(osm.visible('node').length - nodesBefore).toBe(6);
      const [west, east] = jobs.map((j) => osm.element('way', j.result!.id as number)!.nodes!);
      expect(west!.filter((n) => east!.includes(n))).toHaveLength(2);
    } finally {
      await worker.stop();
    }
  });

  it('the hourly edit limit holds across batches: a batch takes only what the limit leaves, the rest waits with the reason', async () => {
    // The limit counts changes (OSM_MAX_EDITS_PER_HOUR, docs/qc.md): a point is one.
    const doneThisHour = (await db.pool.query<{ n: number }>(`SELECT coalesce(sum(coalesce(osm_changes, 1)), 0)::int AS n FROM qc.jobs WHERE task = 'osm_export' AND status = 'exported'`)).rows[0]!.n;
    const ids = [
      await approved('Limit Eins', 'denkmal', { type: 'Point', coordinates: [12.3301, 51.3501] }),
      await approved('Limit Zwei', 'denkmal', { type: 'Point', coordinates: [12.3305, 51.3503] }),
      await approved('Limit Drei', 'denkmal', { type: 'Point', coordinates: [12.3309, 51.3505] }),
    ];
    const uploadsBefore = osm.acceptedUploads.length;
    const worker = await startWorker(db, { ...WORKER_ENV, OSM_MAX_EDITS_PER_HOUR: String(doneThisHour + 2) });
    try {
      const waiting = await waitFor('two exported and one waiting for the edit limit', async () => {
        const jobs = await Promise.all(ids.map(osmJob));
        const done = jobs.filter((j) => j.status === 'exported');
        const held = jobs.filter((j) => j.status === 'queued' && j.reason?.startsWith(`OSM edit limit of ${doneThisHour + 2} changes per hour reached`));
        return done.length === 2 && held.length === 1 ? held[0] : undefined;
      });
      expect(waiting.attempts).toBe(0);
      await new Promise((r) => setTimeout(r, 500));
      expect(osm.acceptedUploads.length - uploadsBefore).toBe(1);
      const jobs = await Promise.all(ids.map(osmJob));
      expect(new Set(jobs.filter((j) => j.status === 'exported').map((j) => j.result!.changesetId)).size).toBe(1);
      expect((await Promise.all(ids.map(osmJob))).filter((j) => j.status === 'exported')).toHaveLength(2);
    } finally {
      await worker.stop();
    }
  });
});

const workerProcess = () => startWorkerProcess(db.url, WORKER_ENV, children);

describe('crash safety of a batch', () => {
  it('a worker killed with SIGKILL after OSM applied the batch upload, before it answered: the next worker reads the changeset back and records each feature once', async () => {
    const features = [
      { name: 'Kill Grabmal', kategorie: 'denkmal', geometry: { type: 'Point', coordinates: [12.4101, 51.3001] } },
      { name: 'Kill Friedhofsteil', kategorie: 'friedhof', geometry: { type: 'Polygon', coordinates: [[[12.4110, 51.3010], [12.4116, 51.3010], [12.4116, 51.3014], [12.4110, 51.3014], [12.4110, 51.3010]]] } },
      // A flower bed is an area: as a point it would be asked about (issue 27: no landuse on a node).
      { name: 'Kill Beet', kategorie: 'blumenbeet', geometry: { type: 'Polygon', coordinates: [[[12.4105, 51.3006], [12.4107, 51.3006], [12.4107, 51.3007], [12.4105, 51.3006]]] } },
    ];
    const ids: string[] = [];
    for (const f of features) ids.push(await approved(f.name, f.kategorie, f.geometry));
    const uploadsBefore = osm.acceptedUploads.length;

    // The batch's upload is applied, but never answered.
    osm.injectFault({ method: 'POST', path: /\/upload$/, mode: 'hold-after-processing' });
    const first = workerProcess();
    await waitFor('the OSM double to hold an applied batch upload', async () => osm.acceptedUploads.length === uploadsBefore + 1, 60_000).catch((error: Error) => {
      throw new Error(`${error.message}\n${first.output()}`);
    });
    first.kill('SIGKILL');
    await exitOf(first);
    const held = (await db.pool.query<{ status: string; batch: string; changeset: string }>(
      `SELECT status, batch_id::text AS batch, journal_changeset_id::text AS changeset FROM qc.jobs WHERE task = 'osm_export' AND feature_id = ANY($1::text[])`,
      [ids],
    )).rows;
    expect(held.map((r) => r.status)).toEqual(['running', 'running', 'running']);
    expect(new Set(held.map((r) => r.batch)).size).toBe(1);
    expect(new Set(held.map((r) => r.changeset)).size).toBe(1);
    const heldChangeset = Number(held[0]!.changeset);
    // Every feature's elements are on OSM already, in the one held upload.
    for (const f of features) expect(taggedElements(f.name), f.name).toHaveLength(1);

    const second = workerProcess();
    let jobs: JobView[];
    try {
      jobs = await exported(ids, 60_000);
    } catch (error) {
      throw new Error(`${(error as Error).message}\n${second.output()}`);
    }

    // Exactly once: no second upload, one element per feature, each recorded from the held changeset.
    expect(osm.acceptedUploads.length - uploadsBefore).toBe(1);
    for (const [i, f] of features.entries()) {
      const elements = taggedElements(f.name);
      expect(elements, f.name).toHaveLength(1);
      expect(jobs[i]!.result).toMatchObject({ type: elements[0]!.type, id: elements[0]!.id, version: elements[0]!.version, changesetId: heldChangeset });
      expect(jobs[i]!.reason).toMatch(new RegExp(`^recovered from changeset ${heldChangeset}`));
    }
    // Two claims (the killed worker's and the recovering one's), each counted once, for the job that
    // led it; before issue 27 every claim counted an attempt for every member of the batch.
    expect(jobs.reduce((n, j) => n + j.attempts, 0)).toBe(2);
    second.kill('SIGTERM');
    await exitOf(second);
    expect(second.exitCode).toBe(0);
    // Two worker processes start under tsx; on a loaded machine that alone can take tens of seconds.
  }, 180_000);
});
