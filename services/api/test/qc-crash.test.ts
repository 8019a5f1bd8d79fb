import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';
import { startMediaWikiDouble, type MediaWikiDouble } from '../../shared/testing/mediawiki-api.js';
import { startOsmApiDouble, type OsmApiDouble } from '../../shared/testing/osm-api.js';
import { exitOf, reviewsOf, settledJobs, startWorkerProcess, waitFor } from './qc-harness.js';

/**
 * Crash safety: `npm run worker` as a real process is killed with SIGKILL while the OSM double and the
 * Wikibase double hold their answers to writes they have already applied. A second worker process
 * takes over the abandoned jobs (the dead process's heartbeat stops) and, reading the journals in
 * qc.jobs, recovers the elements and items instead of creating them again: each approved feature is
 * exported exactly once.
 */
const { db, api } = useTestApi({ queue: true });
let osm: OsmApiDouble;
let wiki: MediaWikiDouble;
const children: ChildProcess[] = [];

beforeAll(async () => {
  [osm, wiki] = await Promise.all([startOsmApiDouble(), startMediaWikiDouble()]);
});
afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await Promise.all([osm?.close(), wiki?.close()]);
});

function workerProcess(): ReturnType<typeof startWorkerProcess> {
  return startWorkerProcess(
    db.url,
    {
      OSM_API_URL: osm.url,
      OSM_ACCESS_TOKEN: 'test-token',
      // These exports go up without a plan review (docs/qc.md "Nothing reaches OSM unseen"); qc-osm-plan-review.test.ts reviews them.
      OSM_AUTO_UPLOAD_CATEGORIES: 'friedhof,blumenbeet,denkmal',
      // The follow-up export writing wikidata= is qc-exports-order.test.ts's subject; here it would add uploads.
      OSM_WIKIDATA_LINK_BACK: 'false',
      WIKIBASE_URL: wiki.url,
      WIKIBASE_USERNAME: 'Exporter@qc',
      WIKIBASE_PASSWORD: 'bot-password-123',
      EXPORT_HTTP_TIMEOUT_MS: '60000',
      EXPORT_DATA_LICENCE: 'CC0-1.0',
    },
    children,
  );
}

describe('crash safety', () => {
  it('a worker killed with SIGKILL in the middle of exports and restarted exports each approved feature exactly once', async () => {
    const contributor = await api.tokenFor('contributor', 'conny');
    const reviewer = await api.tokenFor('reviewer', 'rita');
    const features = [
      { name: 'Crash Friedhof', kategorie: 'friedhof', geometry: { type: 'Point', coordinates: [13.1, 52.1] } },
      { name: 'Crash Denkmal', kategorie: 'denkmal', geometry: { type: 'Polygon', coordinates: [[[13.2, 52.2], [13.21, 52.2], [13.21, 52.21], [13.2, 52.2]]] } },
      // An area: a flower bed as an open way (landuse on a line) is asked about since issue 27.
      { name: 'Crash Beet', kategorie: 'blumenbeet', geometry: { type: 'Polygon', coordinates: [[[13.3, 52.3], [13.31, 52.31], [13.3, 52.31], [13.3, 52.3]]] } },
    ];
    const ids: string[] = [];
    for (const f of features) {
      const created = await api.request('POST', '/api/features', { token: contributor, body: aFeature({ geometry: f.geometry, properties: { name: f.name, kategorie: f.kategorie } }) });
      ids.push(created.json.id as string);
      expect((await api.request('POST', '/api/qc/submit', { token: contributor, body: { featureId: created.json.id } })).status).toBe(200);
      expect((await api.request('POST', `/api/qc/approve/${created.json.id}`, { token: reviewer })).status).toBe(200);
    }

    // The first OSM upload and the first item creation are applied, but never answered. (The item is
    // another feature's: a Wikibase export runs after its own OSM export, which is held.)
    osm.injectFault({ method: 'POST', path: /\/upload$/, mode: 'hold-after-processing' });
    wiki.injectFault({ action: 'wbeditentity', when: (p) => p.new === 'item', mode: 'hold-after-processing' });
    const first = workerProcess();
    await waitFor('the doubles to hold an applied upload and an applied item creation', async () => osm.acceptedUploads.length >= 1 && wiki.createdItems().length === 1, 60_000).catch((error: Error) => {
      throw new Error(`${error.message}\n${first.output()}`);
    });
    first.kill('SIGKILL');
    await exitOf(first);
    expect(first.signalCode).toBe('SIGKILL');
    const abandoned = (await db.pool.query<{ task: string }>(`SELECT task FROM qc.jobs WHERE status = 'running' ORDER BY task`)).rows.map((r) => r.task);
    expect(abandoned).toEqual(['osm_export', 'wikibase_export']);

    const second = workerProcess();
    try {
      for (const id of ids) await settledJobs(api, id, 1, 3, 60_000);
    } catch (error) {
      throw new Error(`${(error as Error).message}\n${second.output()}`);
    }

    // Exactly one upload per feature, one tagged element per feature, one item per feature with a class.
    expect(osm.acceptedUploads).toHaveLength(3);
    for (const f of features) {
      const tagged = [...osm.visible('node'), ...osm.visible('way'), ...osm.visible('relation')].filter((e) => e.tags.name === f.name);
      expect(tagged, f.name).toHaveLength(1);
    }
    expect(wiki.createdItems().map((i) => i.labels.de?.value).sort()).toEqual(['Crash Denkmal', 'Crash Friedhof']);
    for (const [i, id] of ids.entries()) {
      const reviews = await reviewsOf(api, id);
      const byTask = Object.fromEntries(reviews.jobs.map((j) => [j.task, j]));
      expect(byTask.osm_export!.status).toBe('exported');
      expect(byTask.wikibase_export!.status).toBe(features[i]!.kategorie === 'blumenbeet' ? 'not_applicable' : 'exported');
      expect(reviews.exportRecords.osm).toBeDefined();
    }
    const retried = (await db.pool.query<{ task: string; attempts: number }>(`SELECT task, attempts FROM qc.jobs WHERE attempts > 1 ORDER BY task`)).rows;
    expect(retried).toEqual([{ task: 'osm_export', attempts: 2 }, { task: 'wikibase_export', attempts: 2 }]);

    second.kill('SIGTERM');
    await exitOf(second);
    expect(second.exitCode).toBe(0);
    // Two worker processes start under tsx; on a loaded machine that alone can take tens of seconds.
  }, 180_000);
});
