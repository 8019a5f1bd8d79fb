/**
 * The plan review on the desk (issue 27, docs/qc.md "Nothing reaches OSM unseen"), in a real headless
 * Chromium against the real API with its worker on PostGIS, exporting to the OSM API and Overpass
 * doubles: an approval waits with its plan; a reviewer sees what it matched, the tag diff, the map
 * preview and the osmChange on /qc/decisions and confirms it, and exactly that goes up; a plan can be
 * corrected ("create new" instead of the match), which shows a new plan before anything is uploaded.
 * axe-core checks every page visited.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { startOsmApiDouble, type OsmApiDouble } from '../../shared/testing/osm-api.js';
import { startOverpassDouble, type OverpassDouble } from '../../../test/doubles/overpass.js';
import { launchChromium, missingForBrowserTests, openPage, seriousViolations, startWebStack, type WebStack } from './harness.js';

const missing = missingForBrowserTests();
if (missing) console.log(`skipping the plan review's browser tests: ${missing}`);

interface Job {
  id: number;
  featureId: string;
  task: string;
  status: string;
  result: unknown;
  plan?: { action: string } | null;
}

describe.skipIf(missing !== undefined)('the plan review on the desk', () => {
  let stack: WebStack;
  let browser: Browser;
  let osm: OsmApiDouble;
  let overpass: OverpassDouble;
  const contexts: BrowserContext[] = [];
  const violations: string[] = [];
  const tokens: Record<string, string> = {};

  beforeAll(async () => {
    osm = await startOsmApiDouble();
    overpass = await startOverpassDouble(osm);
    osm.seed(`<osm version="0.6">
      <node id="71000001" version="3" lat="51.4401" lon="12.4801"><tag k="historic" v="memorial"/><tag k="name" v="Bismarckstein"/></node>
      <node id="71000002" version="1" lat="51.4501" lon="12.4901"><tag k="historic" v="memorial"/><tag k="name" v="Lutherstein"/></node>
    </osm>`);
    stack = await startWebStack({
      apiEnv: {
        WORKER_ENABLED: 'true',
        WORKER_POLL_INTERVAL_MS: '200',
        OSM_API_URL: osm.url,
        OSM_ACCESS_TOKEN: 'test-token',
        OVERPASS_URL: overpass.url,
        EXPORT_USER_AGENT: 'feature-platform-tests/1.0 (qc@example.org)',
        EXPORT_DATA_LICENCE: 'CC0-1.0',
        EXPORT_HTTP_TIMEOUT_MS: '5000',
      },
    });
    browser = await launchChromium();
    for (const [role, sub] of [['contributor', 'conny'], ['reviewer', 'rita'], ['reviewer', 'rolf']] as const) tokens[sub] = await stack.token(role, sub);
  }, 300_000);
  afterAll(async () => {
    for (const context of contexts) await context.close().catch(() => undefined);
    await browser?.close();
    await stack?.close();
    await Promise.all([osm?.close(), overpass?.close()]);
  });

  const signedIn = (role: string, sub: string): Promise<Page> => openPage(browser, stack.webUrl, contexts, { role, sub }, { viewport: { width: 1100, height: 900 } });

  async function approved(name: string, lon: number, lat: number): Promise<string> {
    const created = await stack.api<{ id: string }>('POST', '/api/features', {
      token: tokens.conny,
      body: { type: 'Feature', geometry: { type: 'Point', coordinates: [lon, lat] }, properties: { name, kategorie: 'denkmal', telefon: '0341 123456' } },
    });
    expect(created.status).toBe(201);
    expect((await stack.api('POST', '/api/qc/submit', { token: tokens.conny, body: { featureId: created.body.id } })).status).toBe(200);
    expect((await stack.api('POST', `/api/qc/approve/${encodeURIComponent(created.body.id)}`, { token: tokens.rolf })).status).toBe(200);
    return created.body.id;
  }
  const waiting = async () => (await stack.api<{ jobs: Job[] }>('GET', '/api/qc/jobs?status=needs_decision', { token: tokens.rita })).body.jobs;
  const osmJob = async (featureId: string) =>
    (await stack.api<{ jobs: Job[] }>('GET', `/api/features/${encodeURIComponent(featureId)}/reviews`, { token: tokens.rita })).body.jobs.filter((j) => j.task === 'osm_export').at(-1)!;

  it('the plan is on the desk — what it matched, the tag diff, the map, the osmChange — and confirming it uploads exactly that', async () => {
    const id = await approved('Bismarckstein', 12.48012, 51.44011);
    await expect.poll(async () => (await waiting()).find((j) => j.featureId === id)?.plan?.action, { timeout: 60_000 }).toBe('modify');
    expect(osm.acceptedUploads).toHaveLength(0);

    const rita = await signedIn('reviewer', 'rita');
    await rita.goto(`${stack.webUrl}/qc/decisions`);
    const section = rita.getByRole('region', { name: 'Entscheidung: Bismarckstein (OpenStreetMap)' });
    await section.waitFor({ state: 'visible' });
    const plan = section.getByRole('region', { name: 'Plan für OpenStreetMap' });
    await expect.poll(() => plan.textContent()).toContain('node 71000001 „Bismarckstein“ ändern');
    const diff = plan.getByRole('table', { name: 'Tag-Änderungen' });
    expect(await diff.getByRole('row').allTextContents()).toEqual(['SchlüsselVorherNachher', 'phone(keiner)+49 341 123456']);
    expect(await plan.getByText('Das osmChange, wie es hochgeladen wird').count()).toBe(1);
    expect(await plan.locator('#plan-osmchange').textContent()).toMatch(/<modify>\s*<node id="71000001" changeset="0" version="3"/);
    const map = section.getByRole('region', { name: /^Karte: das Objekt/ });
    await expect.poll(() => map.getAttribute('data-rendered-at'), { timeout: 20_000 }).toBeTruthy();
    violations.push(...(await seriousViolations(rita)));

    await plan.getByRole('button', { name: 'Plan bestätigen' }).click();
    await rita.waitForURL(/\/qc\/decisions\?decided=/);
    await expect.poll(async () => (await osmJob(id)).status, { timeout: 60_000 }).toBe('exported');
    expect(osm.acceptedUploads).toHaveLength(1);
    expect(osm.element('node', 71000001)!.tags).toEqual({ historic: 'memorial', name: 'Bismarckstein', phone: '+49 341 123456' });
    violations.push(...(await seriousViolations(rita)));
    expect(violations).toEqual([]);
  }, 120_000);

  it('a plan can be corrected: "create new" instead of the match makes a new plan, shown again; only the confirmed one goes up', async () => {
    const id = await approved('Lutherstein', 12.49012, 51.45011);
    await expect.poll(async () => (await waiting()).find((j) => j.featureId === id)?.plan?.action, { timeout: 60_000 }).toBe('modify');
    const uploads = osm.acceptedUploads.length;

    const rita = await signedIn('reviewer', 'rita');
    await rita.goto(`${stack.webUrl}/qc/decisions?lang=en`);
    const section = rita.getByRole('region', { name: 'Decision: Lutherstein (OpenStreetMap)' });
    await section.getByRole('region', { name: 'Plan for OpenStreetMap' }).waitFor({ state: 'visible' });
    await section.getByRole('radio', { name: 'Create new' }).check();
    await section.getByRole('button', { name: 'Decide' }).click();
    await rita.waitForURL(/\/qc\/decisions\?decided=/);

    // The corrected plan waits again: a new element, nothing uploaded yet.
    await expect.poll(async () => (await waiting()).find((j) => j.featureId === id)?.plan?.action, { timeout: 60_000 }).toBe('create');
    expect(osm.acceptedUploads.length).toBe(uploads);
    await rita.goto(`${stack.webUrl}/qc/decisions?lang=en`);
    const again = rita.getByRole('region', { name: 'Decision: Lutherstein (OpenStreetMap)' });
    const plan = again.getByRole('region', { name: 'Plan for OpenStreetMap' });
    await expect.poll(() => plan.textContent()).toContain('Create a new element');
    expect(await plan.getByRole('table', { name: 'Tag changes' }).getByRole('row').allTextContents()).toEqual(['KeyBeforeAfter', 'historic(none)memorial', 'name(none)Lutherstein', 'phone(none)+49 341 123456']);
    violations.push(...(await seriousViolations(rita)));
    await plan.getByRole('button', { name: 'Confirm plan' }).click();
    await rita.waitForURL(/\/qc\/decisions\?decided=/);
    await expect.poll(async () => (await osmJob(id)).status, { timeout: 60_000 }).toBe('exported');
    expect(osm.acceptedUploads.length).toBe(uploads + 1);
    expect(osm.element('node', 71000002)!.version).toBe(1);
    expect(osm.visible('node').filter((n) => n.tags.name === 'Lutherstein')).toHaveLength(2);
    expect(violations).toEqual([]);
  }, 120_000);
});
