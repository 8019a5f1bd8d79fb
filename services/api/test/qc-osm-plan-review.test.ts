import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';
import { readOsmChange } from '../../../test/doubles/osm-change-reader.js';
import { startOsmApiDouble, type OsmApiDouble } from '../../shared/testing/osm-api.js';
import { startOverpassDouble, type OverpassDouble } from '../../../test/doubles/overpass.js';
import { reviewsOf, startWorker, waitFor, type JobView } from './qc-harness.js';

/**
 * Nothing reaches OSM unseen (issue 27, docs/qc.md): an OSM export of a category not in
 * OSM_AUTO_UPLOAD_CATEGORIES stops with its plan — the osmChange as it will be uploaded, a GeoJSON
 * preview before and after, the tag changes, what it matched — and uploads only when a reviewer
 * confirmed exactly that plan; a correction (another choice) makes a new plan to confirm.
 */
const { db, api } = useTestApi({ queue: true });
let osm: OsmApiDouble;
let overpass: OverpassDouble;
let worker: Awaited<ReturnType<typeof startWorker>>;
let contributor: string;
let reviewer: string;

interface Plan {
  osmChange: string;
  action: string;
  target: { type: string; id: number; name: string | null } | null;
  score: number | null;
  tagChanges: { key: string; before: string | null; after: string | null }[];
  preview: { before: { geometry: { type: string } } | null; after: { geometry: { type: string; coordinates: unknown } } };
  proposed: { type: string; id: number } | 'create';
}
interface ListedJob extends JobView {
  featureId: string;
  plan: Plan | null;
  candidates: { type: string; id: number }[];
}

beforeAll(async () => {
  osm = await startOsmApiDouble();
  overpass = await startOverpassDouble(osm);
  contributor = await api.tokenFor('contributor', 'conny');
  reviewer = await api.tokenFor('reviewer', 'rita');
  worker = await startWorker(db, {
    OSM_API_URL: osm.url,
    OSM_ACCESS_TOKEN: 'test-token',
    OVERPASS_URL: overpass.url,
    EXPORT_DATA_LICENCE: 'CC0-1.0',
    EXPORT_CONTACT: 'qc@example.org',
    EXPORT_HTTP_TIMEOUT_MS: '60000',
  });
});
afterAll(async () => {
  await worker?.stop();
  await Promise.all([osm?.close(), overpass?.close()]);
});

async function approve(id: string): Promise<void> {
  expect((await api.request('POST', '/api/qc/submit', { token: contributor, body: { featureId: id } })).status).toBe(200);
  expect((await api.request('POST', `/api/qc/approve/${id}`, { token: reviewer })).status).toBe(200);
}
async function created(name: string, geometry: unknown, extra: Record<string, unknown> = {}): Promise<string> {
  const response = await api.request('POST', '/api/features', { token: contributor, body: aFeature({ geometry, properties: { name, kategorie: 'denkmal', ...extra } }) });
  expect(response.status).toBe(201);
  return response.json.id as string;
}
/** The job waiting with a plan, as the desk lists it. */
const waitingPlan = (featureId: string, what = 'the plan to wait for a reviewer') =>
  waitFor(what, async () => {
    const listed = await api.request('GET', '/api/qc/jobs?status=needs_decision', { token: reviewer });
    return (listed.json.jobs as ListedJob[]).find((j) => j.featureId === featureId && j.plan);
  });
const decide = (jobId: number, choice: unknown) => api.request('POST', `/api/qc/jobs/${jobId}/decision`, { token: reviewer, body: { choice } });
const osmJob = async (id: string) => (await reviewsOf(api, id)).jobs.filter((j) => j.task === 'osm_export').at(-1)!;
const exportedJob = (id: string) => waitFor('the export', async () => {
  const job = await osmJob(id);
  return job.status === 'exported' ? job : undefined;
});

describe('the plan review', () => {
  it('a new element waits with its plan; nothing is uploaded until a reviewer confirms, then exactly that plan goes up', async () => {
    const id = await created('Gedenkstein am Anger', { type: 'Point', coordinates: [11.95, 51.61] }, { telefon: '0345 6789-0' });
    await approve(id);
    const job = await waitingPlan(id);
    expect(job.reason).toBe('the plan awaits a reviewer: create a new element, 3 tag changes');
    expect(job.plan).toMatchObject({ action: 'create', target: null, proposed: 'create', preview: { before: null, after: { geometry: { type: 'Point', coordinates: [11.95, 51.61] } } } });
    expect(job.plan!.tagChanges).toEqual([
      { key: 'historic', before: null, after: 'memorial' },
      { key: 'name', before: null, after: 'Gedenkstein am Anger' },
      { key: 'phone', before: null, after: '+49 345 67890' },
    ]);
    expect(job.plan!.osmChange).toMatch(/<create>\s*<node id="-1" changeset="0" lat="51.6100000" lon="11.9500000">/);
    await new Promise((r) => setTimeout(r, 500));
    expect(osm.acceptedUploads).toHaveLength(0);
    expect(osm.requests.filter((r) => r.path.endsWith('/changeset/create'))).toHaveLength(0);

    expect((await decide(job.id, 'create')).status).toBe(200);
    const done = await exportedJob(id);
    expect(osm.acceptedUploads).toHaveLength(1);
    const uploaded = readOsmChange(osm.acceptedUploads[0]!);
    const planned = readOsmChange(job.plan!.osmChange);
    expect(uploaded.map((b) => b.elements.map((e) => ({ ...e, attrs: { ...e.attrs, changeset: '' } })))).toEqual(planned.map((b) => b.elements.map((e) => ({ ...e, attrs: { ...e.attrs, changeset: '' } }))));
    expect(osm.element('node', done.result!.id as number)!.tags).toEqual({ historic: 'memorial', name: 'Gedenkstein am Anger', phone: '+49 345 67890' });
  });

  it('a re-approval shows the tag diff of the existing element and waits; confirming the element uploads it', async () => {
    const id = await created('Gedenkstein Mühle', { type: 'Point', coordinates: [11.96, 51.61] });
    await approve(id);
    await decide((await waitingPlan(id)).id, 'create');
    const first = await exportedJob(id);
    const nodeId = first.result!.id as number;
    const feature = (await api.request('GET', `/api/features/${id}`)).json;
    feature.properties.name = 'Gedenkstein an der Mühle';
    expect((await api.request('PUT', `/api/features/${id}`, { token: contributor, body: feature })).status).toBe(200);
    await approve(id);
    const job = await waitingPlan(id, 'the re-approval\'s plan');
    expect(job.plan).toMatchObject({ action: 'modify', target: { type: 'node', id: nodeId, name: 'Gedenkstein Mühle' }, proposed: { type: 'node', id: nodeId } });
    expect(job.plan!.tagChanges).toEqual([{ key: 'name', before: 'Gedenkstein Mühle', after: 'Gedenkstein an der Mühle' }]);
    expect(job.candidates.map((c) => `${c.type}/${c.id}`)).toContain(`node/${nodeId}`);
    const uploads = osm.acceptedUploads.length;
    expect((await decide(job.id, { type: 'node', id: nodeId })).status).toBe(200);
    await waitFor('the re-export', async () => ((await osmJob(id)).status === 'exported' && (await osmJob(id)).id === job.id ? true : undefined));
    expect(osm.acceptedUploads.length).toBe(uploads + 1);
    expect(osm.element('node', nodeId)!.tags.name).toBe('Gedenkstein an der Mühle');
  });

  it('a plan matching an existing element can be corrected to "create new": the new plan is shown again and only that one goes up', async () => {
    osm.seed(`<osm version="0.6"><node id="77000001" version="2" lat="51.62" lon="11.97"><tag k="historic" v="memorial"/><tag k="name" v="Bismarckstein"/></node></osm>`);
    const id = await created('Bismarckstein', { type: 'Point', coordinates: [11.97002, 51.62001] }, { telefon: '+49 345 1' });
    await approve(id);
    const job = await waitingPlan(id);
    expect(job.plan).toMatchObject({ action: 'modify', target: { type: 'node', id: 77000001 }, proposed: { type: 'node', id: 77000001 } });
    expect(job.plan!.score).toBeGreaterThan(0.8);
    expect(job.plan!.preview.before).not.toBeNull();
    expect(job.plan!.tagChanges).toEqual([{ key: 'phone', before: null, after: '+49 345 1' }]);
    const uploads = osm.acceptedUploads.length;

    // The reviewer knows better: the city's stone is another one. Correct → a new plan, shown again.
    expect((await decide(job.id, 'create')).status).toBe(200);
    const corrected = await waitFor('the corrected plan', async () => {
      const listed = await api.request('GET', '/api/qc/jobs?status=needs_decision', { token: reviewer });
      return (listed.json.jobs as ListedJob[]).find((j) => j.featureId === id && j.plan?.action === 'create');
    });
    expect(corrected.reason).toBe('the plan awaits a reviewer: create a new element, 3 tag changes (OSM or the choice changed since the last plan)');
    expect(osm.acceptedUploads.length).toBe(uploads);
    expect((await decide(corrected.id, 'create')).status).toBe(200);
    const done = await exportedJob(id);
    expect(done.result!.id).not.toBe(77000001);
    expect(osm.element('node', 77000001)!.version).toBe(2);
  });
});
