import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';
import { startMediaWikiDouble, type MediaWikiDouble } from '../../shared/testing/mediawiki-api.js';
import { startOsmApiDouble, type OsmApiDouble } from '../../shared/testing/osm-api.js';
import { readOsmChange, type UploadedBlock } from '../../../test/doubles/osm-change-reader.js';
import { closeGracefully, listen } from '../../shared/http-server.js';
import { verifyAgencySignature } from '../src/exports/agency/signature.js';
import { reviewsOf, settledJobs, startWorker } from './qc-harness.js';

/**
 * Approval → OSM export, Wikibase export and agency notice, through the HTTP API and the worker,
 * against the OSM API 0.6 double, the MediaWiki/Wikibase double and a signed-webhook receiver.
 * The uploaded osmChange is read element by element for every geometry type, on the first approval
 * and on the re-approval after an edit (which must modify the same elements, not create new ones).
 */
const SECRET = 'agency-secret-with-at-least-32-characters!';
const { db, api } = useTestApi({ queue: true });
let osm: OsmApiDouble;
let wiki: MediaWikiDouble;
let agency: Server;
const deliveries: { headers: Record<string, string | string[] | undefined>; body: string }[] = [];
let worker: Awaited<ReturnType<typeof startWorker>>;
let contributor: string;
let reviewer: string;

beforeAll(async () => {
  [osm, wiki] = await Promise.all([startOsmApiDouble(), startMediaWikiDouble()]);
  agency = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => {
      deliveries.push({ headers: req.headers, body });
      res.writeHead(204).end();
    });
  });
  const agencyPort = await listen(agency, 0, '127.0.0.1');
  contributor = await api.tokenFor('contributor', 'conny');
  reviewer = await api.tokenFor('reviewer', 'rita');
  worker = await startWorker(db, {
    OSM_API_URL: osm.url,
    OSM_ACCESS_TOKEN: 'test-token',
    // These exports go up without a plan review (docs/qc.md "Nothing reaches OSM unseen"); qc-osm-plan-review.test.ts reviews them.
    OSM_AUTO_UPLOAD_CATEGORIES: 'friedhof,blumenbeet,denkmal',
    // The follow-up export writing wikidata= is qc-exports-order.test.ts's subject; here it would add uploads.
    OSM_WIKIDATA_LINK_BACK: 'false',
    WIKIBASE_URL: wiki.url,
    WIKIBASE_USERNAME: 'Exporter@qc',
    WIKIBASE_PASSWORD: 'bot-password-123',
    EXPORT_USER_AGENT: 'feature-platform-tests/1.0',
    EXPORT_DATA_LICENCE: 'CC0-1.0',
    EXPORT_HTTP_TIMEOUT_MS: '5000',
    AGENCY_WEBHOOK_URL: `http://127.0.0.1:${agencyPort}/hook`,
    AGENCY_WEBHOOK_SECRET: SECRET,
    // One changeset per feature, so each upload here is one feature's osmChange, element by element;
    // batches of nearby approvals in one changeset are tested in qc-osm-batch.test.ts.
    OSM_BATCH_MAX_FEATURES: '1',
  });
});
afterAll(async () => {
  await worker?.stop();
  await Promise.all([osm?.close(), wiki?.close(), agency ? closeGracefully(agency, 500) : undefined]);
});

const square = [[13.4, 52.5], [13.41, 52.5], [13.41, 52.51], [13.4, 52.51], [13.4, 52.5]];
const hole = [[13.402, 52.502], [13.404, 52.502], [13.404, 52.504], [13.402, 52.502]];
// Each case on its own ground: rings at the same positions would share nodes (a first export joins
// existing way nodes at a vertex's position), which is right on OSM but not what these cases test.
const shifted = (ring: number[][], dLon: number) => ring.map(([lon, lat]) => [lon! + dLon, lat!]);
const CASES = {
  point: { kategorie: 'friedhof', adresse: 'Hauptstraße 5, 01067 Dresden', telefon: '+49 351 1234', geometry: { type: 'Point', coordinates: [13.7373, 51.0504] } },
  line: { kategorie: 'denkmal', adresse: 'Am Friedhof', geometry: { type: 'LineString', coordinates: [[13.1, 52.1], [13.2, 52.2], [13.3, 52.25]] } },
  polygon: { kategorie: 'blumenbeet', geometry: { type: 'Polygon', coordinates: [shifted(square, -0.05)] } },
  polygonWithHole: { kategorie: 'friedhof', geometry: { type: 'Polygon', coordinates: [square, hole] } },
  multiPolygon: { kategorie: 'denkmal', geometry: { type: 'MultiPolygon', coordinates: [[shifted(square, 0.03), shifted(hole, 0.03)], [[[13.5, 52.5], [13.51, 52.5], [13.51, 52.51], [13.5, 52.5]]]] } },
};
type CaseName = keyof typeof CASES;
const ids = {} as Record<CaseName, string>;
const names = {} as Record<CaseName, string>;
const firstRecords = {} as Record<CaseName, { osm: { type: string; id: number; version: number }; wikibase?: { itemId: string } }>;

/** The one accepted upload carrying the feature's name (each export is its own changeset). */
function uploadOf(name: string): UploadedBlock[] {
  const matching = osm.acceptedUploads.map((xml) => readOsmChange(xml)).filter((blocks) => blocks.some((b) => b.elements.some((e) => e.tags.name === name)));
  expect(matching, `uploads naming ${name}`).toHaveLength(1);
  return matching[0]!;
}
const shape = (block: UploadedBlock) => block.elements.map((e) => `${e.type} ${e.attrs.id}`);

async function submitAndApprove(id: string): Promise<number> {
  const submitted = await api.request('POST', '/api/qc/submit', { token: contributor, body: { featureId: id } });
  expect(submitted.status).toBe(200);
  const approved = await api.request('POST', `/api/qc/approve/${id}`, { token: reviewer, body: { comment: 'ok' } });
  expect(approved.status).toBe(200);
  return approved.json.version as number;
}

describe('first approval', () => {
  it('exports each geometry type to OSM element by element, creates Wikibase items and notifies the agency', async () => {
    for (const [name, c] of Object.entries(CASES) as [CaseName, (typeof CASES)[CaseName]][]) {
      names[name] = `QC ${name}`;
      const created = await api.request('POST', '/api/features', {
        token: contributor,
        body: aFeature({ geometry: c.geometry, properties: { name: names[name], kategorie: c.kategorie, ...('adresse' in c ? { adresse: c.adresse } : {}), ...('telefon' in c ? { telefon: c.telefon } : {}) } }),
      });
      expect(created.status).toBe(201);
      ids[name] = created.json.id as string;
      await submitAndApprove(ids[name]);
    }
    for (const name of Object.keys(CASES) as CaseName[]) {
      const jobs = await settledJobs(api, ids[name], 1, 4);
      const byTask = Object.fromEntries(jobs.map((j) => [j.task, j]));
      expect(byTask.osm_export!.status, JSON.stringify(byTask.osm_export)).toBe('exported');
      expect(byTask.agency_notice!.status).toBe('sent');
      expect(byTask.wikibase_export!.status).toBe(CASES[name].kategorie === 'blumenbeet' ? 'not_applicable' : 'exported');
      const reviews = await reviewsOf(api, ids[name]);
      firstRecords[name] = reviews.exportRecords as never;
    }

    // Point → one tagged node with the parsed address and phone.
    const [pointBlock, ...rest] = uploadOf(names.point);
    expect(rest).toHaveLength(0);
    expect(pointBlock!.action).toBe('create');
    expect(pointBlock!.elements).toHaveLength(1);
    expect(pointBlock!.elements[0]).toMatchObject({ type: 'node', attrs: { id: '-1', lat: '51.0504000', lon: '13.7373000' } });
    // A cemetery as a point is amenity=grave_yard: landuse=* on a node was the damage of issue 27.
    expect(pointBlock!.elements[0]!.tags).toEqual({
      amenity: 'grave_yard', name: names.point, phone: '+49 351 1234',
      'addr:street': 'Hauptstraße', 'addr:housenumber': '5', 'addr:postcode': '01067', 'addr:city': 'Dresden',
    });

    // LineString → an open way over untagged nodes.
    const [line] = uploadOf(names.line);
    expect(shape(line!)).toEqual(['node -1', 'node -2', 'node -3', 'way -4']);
    expect(line!.elements.slice(0, 3).map((e) => [e.attrs.lon, e.attrs.lat])).toEqual([['13.1000000', '52.1000000'], ['13.2000000', '52.2000000'], ['13.3000000', '52.2500000']]);
    expect(line!.elements.slice(0, 3).every((e) => Object.keys(e.tags).length === 0)).toBe(true);
    expect(line!.elements[3]!.nodeRefs).toEqual(['-1', '-2', '-3']);
    // A memorial as an open way is a memorial wall (config/osm-tags.yaml `line:`).
    expect(line!.elements[3]!.tags).toEqual({ historic: 'memorial', memorial: 'wall', name: names.line, 'addr:full': 'Am Friedhof' });

    // Polygon → a closed way; the category mapping comes from metadata.category_mapping.
    const [polygon] = uploadOf(names.polygon);
    expect(shape(polygon!)).toEqual(['node -1', 'node -2', 'node -3', 'node -4', 'way -5']);
    expect(polygon!.elements[4]!.nodeRefs).toEqual(['-1', '-2', '-3', '-4', '-1']);
    expect(polygon!.elements[4]!.tags).toEqual({ landuse: 'flowerbed', name: names.polygon });

    // Polygon with a hole → multipolygon relation with an outer and an inner way.
    const [withHole] = uploadOf(names.polygonWithHole);
    expect(shape(withHole!)).toEqual(['node -1', 'node -2', 'node -3', 'node -4', 'node -6', 'node -7', 'node -8', 'way -5', 'way -9', 'relation -10']);
    expect(withHole!.elements[7]!.nodeRefs).toEqual(['-1', '-2', '-3', '-4', '-1']);
    expect(withHole!.elements[8]!.nodeRefs).toEqual(['-6', '-7', '-8', '-6']);
    expect(withHole!.elements[9]!.members).toEqual([{ type: 'way', ref: '-5', role: 'outer' }, { type: 'way', ref: '-9', role: 'inner' }]);
    expect(withHole!.elements[9]!.tags).toEqual({ type: 'multipolygon', landuse: 'cemetery', name: names.polygonWithHole });

    // MultiPolygon → one relation, an outer way per polygon and an inner for the hole.
    const [multi] = uploadOf(names.multiPolygon);
    const relation = multi!.elements.find((e) => e.type === 'relation')!;
    expect(relation.members.map((m) => m.role)).toEqual(['outer', 'inner', 'outer']);
    expect(multi!.elements.filter((e) => e.type === 'way')).toHaveLength(3);
    expect(multi!.elements.filter((e) => e.type === 'node')).toHaveLength(10);
    expect(relation.tags).toEqual({ type: 'multipolygon', historic: 'memorial', name: names.multiPolygon });

    expect(firstRecords.point.osm).toMatchObject({ type: 'node', version: 1 });
    expect(firstRecords.line.osm.type).toBe('way');
    expect(firstRecords.polygon.osm.type).toBe('way');
    expect(firstRecords.polygonWithHole.osm.type).toBe('relation');
    expect(firstRecords.multiPolygon.osm.type).toBe('relation');

    // Wikibase: items for the categories with a class (P31 from the mapping), none for the flower bed.
    expect(wiki.createdItems()).toHaveLength(4);
    const pointItem = wiki.items.get(firstRecords.point.wikibase!.itemId)!;
    expect(pointItem.labels.de!.value).toBe(names.point);
    expect(pointItem.claims.P31!.map((s) => (s.mainsnak.datavalue!.value as { id: string }).id)).toEqual(['Q39614']);
    expect(pointItem.claims.P625![0]!.mainsnak.datavalue!.value).toMatchObject({ latitude: 51.0504, longitude: 13.7373 });
    expect((wiki.items.get(firstRecords.line.wikibase!.itemId)!.claims.P31![0]!.mainsnak.datavalue!.value as { id: string }).id).toBe('Q4989906');

    // Agency: one signed delivery per approval, kind created.
    expect(deliveries).toHaveLength(5);
    for (const delivery of deliveries) {
      expect(verifyAgencySignature({ secret: SECRET, body: delivery.body, timestamp: delivery.headers['x-agency-timestamp'] as string, signature: delivery.headers['x-agency-signature'] as string })).toBe(true);
    }
    const pointDelivery = JSON.parse(deliveries.find((d) => d.body.includes(names.point))!.body);
    expect(pointDelivery).toMatchObject({ event: 'feature.approved', kind: 'created', previousVersion: null, reviewer: { id: 'rita' }, feature: { id: ids.point, version: 1 } });
  });
});

describe('re-approval after an edit', () => {
  it('modifies the same OSM elements with their current versions and updates the same Wikibase item', async () => {
    const uploadsBefore = osm.acceptedUploads.length;
    const itemsBefore = wiki.createdItems().length;
    const edits: Record<CaseName, (f: { geometry: { coordinates: unknown }; properties: Record<string, unknown> }) => void> = {
      point: (f) => { f.geometry.coordinates = [13.74, 51.06]; f.properties.name = `${names.point} neu`; },
      line: (f) => { (f.geometry.coordinates as number[][]).push([13.4, 52.3]); },
      polygon: (f) => { f.properties.name = `${names.polygon} neu`; },
      polygonWithHole: (f) => { f.properties.telefon = '0351 999'; },
      multiPolygon: (f) => { f.properties.name = `${names.multiPolygon} neu`; },
    };
    for (const name of Object.keys(CASES) as CaseName[]) {
      const feature = (await api.request('GET', `/api/features/${ids[name]}`)).json;
      edits[name](feature);
      const put = await api.request('PUT', `/api/features/${ids[name]}`, { token: contributor, body: feature });
      expect(put.status).toBe(200);
      expect(put.json.properties.status).toBe('draft');
      expect(await submitAndApprove(ids[name])).toBe(2);
    }
    for (const name of Object.keys(CASES) as CaseName[]) {
      const jobs = await settledJobs(api, ids[name], 2, 3);
      expect(jobs.find((j) => j.task === 'osm_export')!.status).toBe('exported');
    }
    expect(osm.acceptedUploads.length).toBe(uploadsBefore + 5);
    expect(wiki.createdItems().length).toBe(itemsBefore);
    const uploads = osm.acceptedUploads.slice(uploadsBefore).map((xml) => readOsmChange(xml));
    const uploadModifying = (type: string, id: number) => {
      const found = uploads.filter((blocks) => blocks.some((b) => b.action === 'modify' && b.elements.some((e) => e.type === type && e.attrs.id === String(id))));
      expect(found, `${type} ${id} modified once`).toHaveLength(1);
      return found[0]!;
    };

    // Point: the same node moved and renamed, at its current version; nothing created.
    const point = firstRecords.point.osm;
    const pointBlocks = uploadModifying('node', point.id);
    expect(pointBlocks.map((b) => b.action)).toEqual(['modify']);
    expect(pointBlocks[0]!.elements).toHaveLength(1);
    expect(pointBlocks[0]!.elements[0]!.attrs).toMatchObject({ id: String(point.id), version: '1', lat: '51.0600000', lon: '13.7400000' });
    expect(pointBlocks[0]!.elements[0]!.tags.name).toBe(`${names.point} neu`);

    // LineString: one new node for the extra vertex, the way modified over old nodes + the new one.
    const line = firstRecords.line.osm;
    const lineBlocks = uploadModifying('way', line.id);
    const created = lineBlocks.filter((b) => b.action === 'create').flatMap((b) => b.elements);
    expect(created.map((e) => e.type)).toEqual(['node']);
    expect([created[0]!.attrs.lon, created[0]!.attrs.lat]).toEqual(['13.4000000', '52.3000000']);
    const way = lineBlocks.find((b) => b.action === 'modify')!.elements.find((e) => e.type === 'way')!;
    expect(way.attrs.version).toBe('1');
    expect(way.nodeRefs).toHaveLength(4);
    expect(way.nodeRefs.slice(0, 3)).toEqual(osm.element('way', line.id)!.nodes!.slice(0, 3).map(String));
    expect(way.nodeRefs[3]).toBe(created[0]!.attrs.id);

    // Polygon, polygon with hole, MultiPolygon: only the tagged root changes (tags), same id.
    for (const [name, type] of [['polygon', 'way'], ['polygonWithHole', 'relation'], ['multiPolygon', 'relation']] as const) {
      const root = firstRecords[name].osm;
      const blocks = uploadModifying(type, root.id);
      expect(blocks.map((b) => b.action), name).toEqual(['modify']);
      expect(shape(blocks[0]!)).toEqual([`${type} ${root.id}`]);
      expect(blocks[0]!.elements[0]!.attrs.version).toBe(String(root.version));
    }
    // The phone as OSM writes it (it was written verbatim before, issue 27).
    expect(uploadModifying('relation', firstRecords.polygonWithHole.osm.id)[0]!.elements[0]!.tags.phone).toBe('+49 351 999');

    // Export records point at the same elements and items, at their new versions.
    for (const name of Object.keys(CASES) as CaseName[]) {
      const records = (await reviewsOf(api, ids[name])).exportRecords as typeof firstRecords[CaseName];
      expect(records.osm.id).toBe(firstRecords[name].osm.id);
      expect(records.osm.version).toBe(firstRecords[name].osm.version + 1);
      expect(records.wikibase?.itemId).toBe(firstRecords[name].wikibase?.itemId);
    }
    expect(wiki.items.get(firstRecords.point.wikibase!.itemId)!.labels.de!.value).toBe(`${names.point} neu`);
    // The link back from OSM (issue 27): the re-export wrote the feature's item as wikidata=* on its element.
    expect(osm.element('node', firstRecords.point.osm.id)!.tags.wikidata).toBe(firstRecords.point.wikibase!.itemId);

    const agencyUpdate = JSON.parse(deliveries.filter((d) => d.body.includes(ids.point)).at(-1)!.body);
    expect(agencyUpdate).toMatchObject({ kind: 'updated', previousVersion: 1, geometryChanged: true, changes: [{ field: 'name', before: names.point, after: `${names.point} neu` }] });
  });

  it('an OSM version conflict is recorded for an admin, not retried, and an admin re-run exports it', async () => {
    const id = ids.point;
    const record = (await reviewsOf(api, id)).exportRecords.osm as { id: number };
    const feature = (await api.request('GET', `/api/features/${id}`)).json;
    feature.properties.name = 'Konflikt';
    expect((await api.request('PUT', `/api/features/${id}`, { token: contributor, body: feature })).status).toBe(200);
    // Someone else edits the node between our read and our upload: the double answers 409 once.
    osm.injectFault({ method: 'POST', path: /\/upload$/, mode: 'status', status: 409 });
    await submitAndApprove(id);
    const jobs = await settledJobs(api, id, 3, 3);
    const conflict = jobs.find((j) => j.task === 'osm_export')!;
    expect(conflict.status).toBe('conflict');
    expect(conflict.attempts).toBe(1);
    const admin = await api.tokenFor('admin', 'adam');
    const listed = await api.request('GET', '/api/qc/jobs?status=conflict', { token: admin });
    expect(listed.json.jobs.map((j: { id: number }) => j.id)).toContain(conflict.id);
    const rerun = await api.request('POST', `/api/qc/jobs/${conflict.id}/rerun`, { token: admin });
    expect(rerun.status).toBe(200);
    const after = await settledJobs(api, id, 3, 3);
    expect(after.find((j) => j.id === conflict.id)).toMatchObject({ status: 'exported', attempts: 2 });
    expect(osm.element('node', record.id)!.tags.name).toBe('Konflikt');
  });
});
