import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';
import { startMediaWikiDouble, type MediaWikiDouble } from '../../shared/testing/mediawiki-api.js';
import { startOsmApiDouble, type OsmApiDouble } from '../../shared/testing/osm-api.js';
import { reviewsOf, startWorker, waitFor } from './qc-harness.js';

/**
 * The Wikibase export of an approval runs after its OSM export (issue 27, docs/qc.md "Jobs"): while
 * the OSM export is retrying after a 429, the Wikibase job waits without using an attempt; once the
 * OSM export has linked the community's node, whose wikidata tag names an item, the Wikibase export
 * links that item instead of creating a duplicate. Before, the two raced in separate queues.
 */
const { db, api } = useTestApi({ queue: true });
let osm: OsmApiDouble;
let wiki: MediaWikiDouble;

beforeAll(async () => {
  osm = await startOsmApiDouble();
  wiki = await startMediaWikiDouble();
});
afterAll(async () => {
  await osm?.close();
  await wiki?.close();
});

describe('the Wikibase export follows the OSM export', () => {
  it('waits while the OSM export retries, then links the item the OSM element names; no duplicate item', async () => {
    const entity = (id: string) => ({ 'entity-type': 'item', 'numeric-id': Number(id.slice(1)), id });
    const itemId = wiki.addItem({ labels: { de: 'Gedenkstein Rodau' }, claims: { P31: [{ type: 'wikibase-entityid', value: entity('Q4989906') }] } });
    osm.seed(`<osm version="0.6"><node id="99000001" version="2" lat="51.61" lon="11.91"><tag k="historic" v="memorial"/><tag k="name" v="Gedenkstein Rodau"/><tag k="wikidata" v="${itemId}"/></node></osm>`);
    const contributor = await api.tokenFor('contributor', 'conny');
    const reviewer = await api.tokenFor('reviewer', 'rita');
    const created = await api.request('POST', '/api/features', { token: contributor, body: aFeature({ geometry: { type: 'Point', coordinates: [11.91001, 51.61001] }, properties: { name: 'Gedenkstein Rodau', kategorie: 'denkmal', telefon: '0345 1234' } }) });
    const id = created.json.id as string;
    expect((await api.request('POST', '/api/qc/submit', { token: contributor, body: { featureId: id } })).status).toBe(200);
    expect((await api.request('POST', `/api/qc/approve/${id}`, { token: reviewer })).status).toBe(200);

    osm.injectFault({ method: 'POST', path: /\/upload$/, mode: 'status', status: 429, headers: { 'retry-after': '3' } });
    const worker = await startWorker(db, {
      OSM_API_URL: osm.url,
      OSM_ACCESS_TOKEN: 'test-token',
      // These exports go up without a plan review (docs/qc.md "Nothing reaches OSM unseen"); qc-osm-plan-review.test.ts reviews them.
      OSM_AUTO_UPLOAD_CATEGORIES: 'friedhof,blumenbeet,denkmal',
      WIKIBASE_URL: wiki.url,
      WIKIBASE_USERNAME: 'Exporter@qc',
      WIKIBASE_PASSWORD: 'bot-password-123',
      EXPORT_DATA_LICENCE: 'CC0-1.0',
      EXPORT_CONTACT: 'qc@example.org',
      EXPORT_HTTP_TIMEOUT_MS: '60000',
    });
    try {
      const waiting = await waitFor('the Wikibase export to wait for the retrying OSM export', async () => {
        const jobs = (await reviewsOf(api, id)).jobs;
        const osmJob = jobs.find((j) => j.task === 'osm_export')!;
        const wikiJob = jobs.find((j) => j.task === 'wikibase_export')!;
        return osmJob.status === 'retrying' && wikiJob.reason?.startsWith('waits for the OSM export of this approval') ? wikiJob : undefined;
      });
      expect(waiting.status).toBe('queued');
      expect(waiting.attempts).toBe(0);
      expect(wiki.createdItems()).toHaveLength(0);

      const done = await waitFor('both exports', async () => {
        const jobs = (await reviewsOf(api, id)).jobs;
        return jobs.filter((j) => j.task === 'osm_export' || j.task === 'wikibase_export').every((j) => j.status === 'exported' || j.status === 'unchanged') ? jobs : undefined;
      }, 30_000);
      expect(done.find((j) => j.task === 'osm_export')!.result).toMatchObject({ type: 'node', id: 99000001, linked: true });
      expect(done.find((j) => j.task === 'wikibase_export')!.result).toMatchObject({ itemId, linked: true });
      expect(wiki.createdItems()).toHaveLength(0);
      expect(osm.element('node', 99000001)!.tags).toMatchObject({ wikidata: itemId, phone: '+49 345 1234' });
    } finally {
      await worker.stop();
    }
  });

  it('the link back: after the Wikibase export created the item, an OSM export of the same approval writes wikidata=<item> on the element', async () => {
    const contributor = await api.tokenFor('contributor', 'conny');
    const reviewer = await api.tokenFor('reviewer', 'rita');
    const created = await api.request('POST', '/api/features', { token: contributor, body: aFeature({ geometry: { type: 'Point', coordinates: [11.93, 51.63] }, properties: { name: 'Gedenkstein Neubau', kategorie: 'denkmal' } }) });
    const id = created.json.id as string;
    expect((await api.request('POST', '/api/qc/submit', { token: contributor, body: { featureId: id } })).status).toBe(200);
    expect((await api.request('POST', `/api/qc/approve/${id}`, { token: reviewer })).status).toBe(200);
    const worker = await startWorker(db, {
      OSM_API_URL: osm.url,
      OSM_ACCESS_TOKEN: 'test-token',
      OSM_AUTO_UPLOAD_CATEGORIES: 'denkmal',
      WIKIBASE_URL: wiki.url,
      WIKIBASE_USERNAME: 'Exporter@qc',
      WIKIBASE_PASSWORD: 'bot-password-123',
      EXPORT_DATA_LICENCE: 'CC0-1.0',
      EXPORT_CONTACT: 'qc@example.org',
    });
    try {
      const linked = await waitFor('the element to carry its item', async () => {
        const reviews = await reviewsOf(api, id);
        const item = (reviews.exportRecords.wikibase as { itemId?: string } | undefined)?.itemId;
        const element = reviews.exportRecords.osm as { type: 'node'; id: number } | undefined;
        return item && element && osm.element('node', element.id)?.tags.wikidata === item ? { item, element } : undefined;
      }, 30_000);
      // The job records its outcome just after the upload the element shows: wait for that write too.
      const jobs = await waitFor('both OSM exports recorded', async () => {
        const found = (await reviewsOf(api, id)).jobs.filter((j) => j.task === 'osm_export');
        return found.every((j) => j.status !== 'running' && j.status !== 'queued') ? found : undefined;
      }, 10_000);
      expect(jobs.map((j) => j.status)).toEqual(['exported', 'exported']);
      expect(wiki.createdItems().filter((i) => i.labels.de?.value === 'Gedenkstein Neubau').map((i) => i.id)).toEqual([linked.item]);
      // Written once: the follow-up's record carries it, so no further export is queued.
      await new Promise((r) => setTimeout(r, 1_000));
      expect((await reviewsOf(api, id)).jobs.filter((j) => j.task === 'osm_export')).toHaveLength(2);
    } finally {
      await worker.stop();
    }
  });
});
