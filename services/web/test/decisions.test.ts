/**
 * Conflation decisions on the review desk, in a real headless Chromium against the real API with its
 * worker on PostGIS, exporting to the OSM API and Overpass doubles: two approvals whose lookups each
 * find two candidates stop with needs_decision; a reviewer follows the navigation's count to
 * /qc/decisions, sees the feature's candidates by name, picks one with the keyboard and decides; the
 * job resumes and modifies that element (no new one), and the page moves on to the next waiting job.
 * Contributors and guests get no access. axe-core checks every page visited.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { startOsmApiDouble, type OsmApiDouble } from '../../shared/testing/osm-api.js';
import { startOverpassDouble, type OverpassDouble } from '../../../test/doubles/overpass.js';
import { isFocused, launchChromium, missingForBrowserTests, openPage, repoRoot, seriousViolations, startWebStack, type WebStack } from './harness.js';

const missing = missingForBrowserTests();
if (missing) console.log(`skipping the conflation decisions' browser tests: ${missing}`);

const SCREENSHOTS = join(repoRoot, 'docs/web');

interface Job {
  id: number;
  featureId: string;
  task: string;
  status: string;
  result: unknown;
}

describe.skipIf(missing !== undefined)('conflation decisions on the review desk', () => {
  let stack: WebStack;
  let browser: Browser;
  let osm: OsmApiDouble;
  let overpass: OverpassDouble;
  const contexts: BrowserContext[] = [];
  const violations: string[] = [];
  const tokens: Record<string, string> = {};
  let monument = '';
  let stone = '';

  beforeAll(async () => {
    osm = await startOsmApiDouble();
    overpass = await startOverpassDouble(osm);
    // Two memorials a few metres apart around each feature: two candidates each, so both wait.
    osm.seed(`<osm version="0.6">
      <node id="70000001" version="1" lat="51.3401" lon="12.3801"><tag k="historic" v="memorial"/><tag k="name" v="Kriegerdenkmal"/></node>
      <node id="70000002" version="4" lat="51.34012" lon="12.38013"><tag k="historic" v="monument"/><tag k="name" v="Kriegerdenkmal 1870/71"/><tag k="memorial:type" v="obelisk"/></node>
      <node id="70000003" version="2" lat="51.35012" lon="12.39012"><tag k="historic" v="memorial"/><tag k="name" v="Gedenkstein"/></node>
      <node id="70000004" version="1" lat="51.35008" lon="12.39008"><tag k="historic" v="memorial"/><tag k="name" v="Gedenkstein"/><tag k="memorial" v="stone"/></node>
    </osm>`);
    stack = await startWebStack({
      apiEnv: {
        WORKER_ENABLED: 'true',
        WORKER_POLL_INTERVAL_MS: '200',
        OSM_API_URL: osm.url,
        OSM_ACCESS_TOKEN: 'test-token',
        // These exports go up without a plan review (docs/qc.md "Nothing reaches OSM unseen"); qc-osm-plan-review.test.ts reviews them.
        OSM_AUTO_UPLOAD_CATEGORIES: 'friedhof,blumenbeet,denkmal',
        OVERPASS_URL: overpass.url,
        EXPORT_USER_AGENT: 'feature-platform-tests/1.0',
        EXPORT_DATA_LICENCE: 'CC0-1.0',
        EXPORT_HTTP_TIMEOUT_MS: '5000',
      },
    });
    browser = await launchChromium();
    mkdirSync(SCREENSHOTS, { recursive: true });
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
      body: { type: 'Feature', geometry: { type: 'Point', coordinates: [lon, lat] }, properties: { name, kategorie: 'denkmal', telefon: '+49 341 5' } },
    });
    expect(created.status).toBe(201);
    expect((await stack.api('POST', '/api/qc/submit', { token: tokens.conny, body: { featureId: created.body.id } })).status).toBe(200);
    expect((await stack.api('POST', `/api/qc/approve/${encodeURIComponent(created.body.id)}`, { token: tokens.rolf })).status).toBe(200);
    return created.body.id;
  }

  const waiting = async () => (await stack.api<{ jobs: Job[] }>('GET', '/api/qc/jobs?status=needs_decision', { token: tokens.rita })).body.jobs;
  const osmJobOf = async (featureId: string) =>
    (await stack.api<{ jobs: Job[]; decisions: Array<{ jobId: number; outcome: string; chosen: string | null; decidedBy: string | null }> }>('GET', `/api/features/${encodeURIComponent(featureId)}/reviews`, { token: tokens.rita })).body;

  it('two approvals whose lookups find two candidates each wait for a decision, and nothing is uploaded yet', async () => {
    monument = await approved('Kriegerdenkmal', 12.38011, 51.34011);
    await expect.poll(async () => (await waiting()).map((job) => job.featureId), { timeout: 60_000 }).toEqual([monument]);
    stone = await approved('Gedenkstein', 12.3901, 51.3501);
    await expect.poll(async () => (await waiting()).length, { timeout: 60_000 }).toBe(2);
    expect(osm.acceptedUploads).toHaveLength(0);
  });

  it('a reviewer opens /qc/decisions from the navigation, sees the feature and both candidates by name, picks one with the keyboard and decides; the job resumes and modifies that element, not a new one', async () => {
    const rita = await signedIn('reviewer', 'rita');
    await rita.getByRole('link', { name: 'Entscheidungen (2 offen)' }).click();
    await rita.waitForURL(/\/qc\/decisions$/);
    const list = rita.getByRole('table', { name: 'Exportaufträge, die auf eine Entscheidung warten, älteste zuerst' });
    expect(await list.getByRole('rowheader').allTextContents()).toEqual(['Kriegerdenkmal', 'Gedenkstein']);
    expect(await list.getByRole('row').filter({ has: rita.getByRole('link', { name: 'Kriegerdenkmal' }) }).textContent()).toMatch(/OpenStreetMap.*2 Kandidaten/);
    const section = rita.getByRole('region', { name: 'Entscheidung: Kriegerdenkmal (OpenStreetMap)' });
    await section.waitFor({ state: 'visible' });
    const group = section.getByRole('group', { name: 'Welches Objekt ist es?' });
    const radios = group.getByRole('radio');
    const obelisk = group.getByRole('radio', { name: /^Kandidat \d: Kriegerdenkmal 1870\/71 \(node 70000002\)$/ });
    const other = group.getByRole('radio', { name: /^Kandidat \d: Kriegerdenkmal \(node 70000001\)$/ });
    for (const radio of [obelisk, other, group.getByRole('radio', { name: 'Neu anlegen' })]) await radio.waitFor({ state: 'visible' });
    expect(await radios.count()).toBe(3);
    // Each candidate's tags, distance and rating are its description, for screen readers too.
    const description = await obelisk.evaluate((input) => document.getElementById(input.getAttribute('aria-describedby') ?? '')?.textContent ?? '');
    for (const expected of ['memorial:type=obelisk', 'historic=monument', 'Abstand', 'Namensähnlichkeit']) expect(description).toContain(expected);
    const map = section.getByRole('region', { name: /^Karte: das Objekt \(blau\) und die Kandidaten/ });
    await expect.poll(() => map.getAttribute('data-rendered-at'), { timeout: 20_000 }).toBeTruthy();
    violations.push(...(await seriousViolations(rita)));

    // Keyboard only: into the group, Space picks the focused radio, arrows move the choice.
    await radios.first().focus();
    await rita.keyboard.press('Space');
    for (let step = 0; step < 3 && !(await obelisk.isChecked()); step++) await rita.keyboard.press('ArrowDown');
    expect(await obelisk.isChecked()).toBe(true);
    expect(await isFocused(obelisk)).toBe(true);
    await rita.screenshot({ path: join(SCREENSHOTS, 'desk-decisions.png'), fullPage: true });
    const decide = section.getByRole('button', { name: 'Entscheiden' });
    for (let step = 0; step < 4 && !(await isFocused(rita.getByLabel('Kommentar (optional)'))); step++) await rita.keyboard.press('Tab');
    await rita.keyboard.type('der Obelisk ist es');
    await rita.keyboard.press('Tab');
    expect(await isFocused(decide)).toBe(true);
    await rita.keyboard.press('Enter');

    // On to the next waiting job; the decided one's export is followed until it is done.
    await rita.waitForURL(/\/qc\/decisions\?decided=/);
    await rita.getByRole('region', { name: 'Entscheidung: Gedenkstein (OpenStreetMap)' }).waitFor({ state: 'visible' });
    await rita.getByRole('link', { name: 'Entscheidungen (1 offen)' }).waitFor({ state: 'visible' });
    const result = rita.getByRole('status').filter({ hasText: 'Entscheidung für „Kriegerdenkmal“ gespeichert: node/70000002' });
    await expect.poll(() => result.textContent(), { timeout: 60_000 }).toContain('Export nach OpenStreetMap: exportiert (node 70000002)');
    violations.push(...(await seriousViolations(rita)));

    // At the API and the OSM double: the chosen element was modified (tags merged), nothing was created.
    const reviews = await osmJobOf(monument);
    const job = reviews.jobs.find((j) => j.task === 'osm_export')!;
    expect(job).toMatchObject({ status: 'exported', result: { type: 'node', id: 70000002, linked: true } });
    expect(reviews.decisions.filter((d) => d.jobId === job.id)).toMatchObject([
      { outcome: 'needs_decision', decidedBy: null },
      { outcome: 'link', chosen: 'node/70000002', decidedBy: 'rita' },
    ]);
    expect(osm.element('node', 70000002)!.tags).toEqual({ historic: 'monument', name: 'Kriegerdenkmal 1870/71', 'memorial:type': 'obelisk', phone: '+49 341 5' });
    expect(osm.element('node', 70000001)!.version).toBe(1);
    expect(osm.visible('node')).toHaveLength(4);
    expect(osm.acceptedUploads).toHaveLength(1);
    expect((await waiting()).map((j) => j.featureId)).toEqual([stone]);
    expect(violations).toEqual([]);
  });

  it('without a choice "Decide" says what is missing and sends nothing; the page speaks English too', async () => {
    const rita = await signedIn('reviewer', 'rita');
    await rita.goto(`${stack.webUrl}/qc/decisions?lang=en`);
    const section = rita.getByRole('region', { name: 'Decision: Gedenkstein (OpenStreetMap)' });
    await section.getByRole('radio', { name: 'Create new' }).waitFor({ state: 'visible' });
    await section.getByRole('button', { name: 'Decide' }).click();
    await expect.poll(() => rita.getByRole('alert').filter({ hasText: 'Please choose a candidate' }).count()).toBe(1);
    expect((await waiting()).map((j) => j.featureId)).toEqual([stone]);
    violations.push(...(await seriousViolations(rita)));
    await rita.goto(`${stack.webUrl}/qc/decisions?lang=de`);
    expect(violations).toEqual([]);
  });

  it('contributors and guests get no access to the decisions, and see no link to them', async () => {
    for (const [role, sub] of [['contributor', 'conny'], ['guest', 'gina']] as const) {
      const page = await signedIn(role, sub);
      expect(await page.getByRole('link', { name: /^Entscheidungen/ }).count()).toBe(0);
      const response = await page.goto(`${stack.webUrl}/qc/decisions`);
      expect(response?.status()).toBe(403);
      await expect.poll(() => page.getByRole('alert').textContent()).toContain('Prüferinnen, Prüfer und Admins');
      expect(await page.getByRole('radio').count()).toBe(0);
      expect(await page.getByRole('button', { name: 'Entscheiden' }).count()).toBe(0);
      violations.push(...(await seriousViolations(page)));
    }
    // And the API refuses them the decision itself.
    const job = (await waiting())[0]!;
    expect((await stack.api('POST', `/api/qc/jobs/${job.id}/decision`, { token: tokens.conny, body: { choice: 'create' } })).status).toBe(403);
    expect((await waiting()).map((j) => j.featureId)).toEqual([stone]);
    expect(violations).toEqual([]);
  });

  it('a decision someone else made meanwhile is refused with the API\'s reason; then nothing is left to decide', async () => {
    const rita = await signedIn('reviewer', 'rita');
    await rita.goto(`${stack.webUrl}/qc/decisions`);
    const section = rita.getByRole('region', { name: 'Entscheidung: Gedenkstein (OpenStreetMap)' });
    await section.getByRole('radio', { name: 'Neu anlegen' }).check();
    // Creating new: moving a chosen element's geometry does not apply.
    expect(await section.getByRole('checkbox', { name: 'Geometrie des gewählten Elements auf die des Objekts verschieben' }).isDisabled()).toBe(true);
    const job = (await waiting())[0]!;
    expect((await stack.api('POST', `/api/qc/jobs/${job.id}/decision`, { token: tokens.rolf, body: { choice: 'create' } })).status).toBe(200);
    await section.getByRole('button', { name: 'Entscheiden' }).click();
    await expect.poll(() => section.getByRole('status').textContent()).toMatch(/^Die Entscheidung wurde nicht gespeichert: .*needs_decision/);
    expect(await section.getByRole('button', { name: 'Entscheiden' }).isEnabled()).toBe(true);
    // Rolf's "create new" made a new element; the earlier decision's element is untouched.
    await expect.poll(async () => (await osmJobOf(stone)).jobs.find((j) => j.task === 'osm_export')?.status, { timeout: 60_000 }).toBe('exported');
    expect(osm.visible('node')).toHaveLength(5);
    expect(osm.element('node', 70000002)!.tags.name).toBe('Kriegerdenkmal 1870/71');
    await rita.goto(`${stack.webUrl}/qc/decisions`);
    await rita.getByText('Keine Entscheidungen offen.').waitFor({ state: 'visible' });
    expect(await rita.getByRole('link', { name: 'Entscheidungen (0 offen)' }).count()).toBe(1);
    expect(await rita.getByRole('radio').count()).toBe(0);
    violations.push(...(await seriousViolations(rita)));
    expect(violations).toEqual([]);
  });
});
