/**
 * The QC desk in a real headless Chromium against the real API (with its worker) on PostGIS: a
 * contributor submits with a comment; reviewers see the queue, claim items by opening them and see each
 * other's claims; a rejection with a reason picked by keyboard; the contributor reads the reason, fixes
 * and resubmits; an approval and the export jobs it starts (skipped: nothing configured); four-eyes;
 * and two desks racing for one item. axe-core checks every desk page visited.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { isFocused, launchChromium, missingForBrowserTests, openPage, repoRoot, seriousViolations, startWebStack, type WebStack } from './harness.js';

const missing = missingForBrowserTests();
if (missing) console.log(`skipping the QC desk's browser tests: ${missing}`);

const SCREENSHOTS = join(repoRoot, 'docs/web');

interface Reviews {
  status: string;
  transitions: Array<{ action: string; comment: string | null; actor: string }>;
  jobs: Array<{ task: string; status: string; reason: string | null }>;
}

describe.skipIf(missing !== undefined)('the QC desk in a browser', () => {
  let stack: WebStack;
  let browser: Browser;
  const contexts: BrowserContext[] = [];
  const violations: string[] = [];
  const tokens: Record<string, string> = {};

  beforeAll(async () => {
    // The worker runs, so the jobs after an approval reach their outcome (skipped: nothing configured).
    stack = await startWebStack({ apiEnv: { WORKER_ENABLED: 'true', WORKER_POLL_INTERVAL_MS: '200' } });
    browser = await launchChromium();
    mkdirSync(SCREENSHOTS, { recursive: true });
    for (const [role, sub] of [['contributor', 'alice'], ['contributor', 'bob'], ['reviewer', 'rita'], ['reviewer', 'rolf']] as const) tokens[sub] = await stack.token(role, sub);
  }, 300_000);
  afterAll(async () => {
    for (const context of contexts) await context.close().catch(() => undefined);
    await browser?.close();
    await stack?.close();
  });

  const signedIn = (role: string, sub: string): Promise<Page> => openPage(browser, stack.webUrl, contexts, { role, sub }, { viewport: { width: 1100, height: 900 } });

  async function audit(page: Page): Promise<void> {
    violations.push(...(await seriousViolations(page)));
  }

  async function createFeature(owner: string, name: string, kategorie: string, lon: number): Promise<string> {
    const { status, body } = await stack.api<{ id: string }>('POST', '/api/features', {
      token: tokens[owner],
      body: { type: 'Feature', geometry: { type: 'Point', coordinates: [lon, 52.52] }, properties: { name, kategorie } },
    });
    expect(status).toBe(201);
    return body.id;
  }

  const reviews = async (id: string) => (await stack.api<Reviews>('GET', `/api/features/${encodeURIComponent(id)}/reviews`, { token: tokens.rita })).body;

  let cemetery = '';
  let monument = '';
  let rita: Page;
  let rolf: Page;
  let alice: Page;

  it('a contributor submits a feature for review with a comment, and finds it under "my submissions"; the desk itself is closed to her', async () => {
    cemetery = await createFeature('alice', 'Friedhof am Weinberg', 'friedhof', 13.401);
    alice = await signedIn('contributor', 'alice');
    await alice.goto(`${stack.webUrl}/features/${encodeURIComponent(cemetery)}`);
    await alice.getByLabel('Kommentar zur Einreichung').fill('Neu erfasst nach Begehung');
    await audit(alice);
    await alice.getByRole('button', { name: 'Zur Prüfung einreichen' }).click();
    await expect.poll(() => alice.getByRole('status').filter({ hasText: 'Eingereicht' }).count()).toBe(1);
    const submitted = await reviews(cemetery);
    expect(submitted.status).toBe('in_qc');
    expect(submitted.transitions.at(-1)).toMatchObject({ action: 'submit', comment: 'Neu erfasst nach Begehung', actor: 'alice' });

    const desk = await alice.goto(`${stack.webUrl}/qc`);
    expect(desk?.status()).toBe(403);
    await expect.poll(() => alice.getByRole('alert').textContent()).toContain('Prüferinnen, Prüfer und Admins');
    await alice.getByRole('link', { name: 'Meine Einreichungen' }).click();
    const row = alice.getByRole('row').filter({ has: alice.getByRole('link', { name: 'Friedhof am Weinberg' }) });
    await expect.poll(() => row.textContent()).toContain('In Prüfung');
    await audit(alice);
    expect(violations).toEqual([]);
  });

  it('a reviewer sees the queue oldest first with its count in the navigation and filters, claims an item by opening it, and a second reviewer sees who holds it', async () => {
    monument = await createFeature('bob', 'Kriegerdenkmal Nord', 'denkmal', 13.402);
    expect((await stack.api('POST', '/api/qc/submit', { token: tokens.bob, body: { featureId: monument, comment: 'Bitte prüfen' } })).status).toBe(200);

    rita = await signedIn('reviewer', 'rita');
    await expect.poll(() => rita.getByRole('link', { name: 'Prüfung (2 offen)' }).count()).toBe(1);
    await rita.getByRole('link', { name: 'Prüfung (2 offen)' }).click();
    await rita.waitForURL(/\/qc$/);
    const queue = rita.getByRole('table', { name: 'Eingereichte Objekte, älteste zuerst' });
    const names = await queue.getByRole('rowheader').allTextContents();
    expect(names).toEqual(['Friedhof am Weinberg', 'Kriegerdenkmal Nord']);
    const first = queue.getByRole('row').filter({ has: rita.getByRole('link', { name: 'Friedhof am Weinberg' }) });
    const firstText = await first.textContent();
    for (const expected of ['Friedhof', 'alice', 'Neu erfasst nach Begehung', 'frei']) expect(firstText).toContain(expected);
    await audit(rita);

    await rita.getByLabel('Kategorie').selectOption('denkmal');
    await rita.getByRole('button', { name: 'Filtern' }).click();
    await expect.poll(() => queue.getByRole('rowheader').allTextContents()).toEqual(['Kriegerdenkmal Nord']);
    await rita.getByLabel('Kategorie').selectOption('');
    await rita.getByLabel('Eingereicht von').selectOption('alice');
    await rita.getByRole('button', { name: 'Filtern' }).click();
    await expect.poll(() => queue.getByRole('rowheader').allTextContents()).toEqual(['Friedhof am Weinberg']);

    await rita.getByRole('link', { name: 'Friedhof am Weinberg' }).click();
    await rita.waitForURL(/\/qc\/[^/]+$/);
    await expect.poll(() => rita.getByRole('status').filter({ hasText: 'Sie prüfen dieses Objekt' }).count()).toBe(1);
    expect(await rita.getByRole('blockquote').textContent()).toBe('Neu erfasst nach Begehung');
    await rita.getByText('Noch keine freigegebene Version').waitFor({ state: 'visible' });
    await audit(rita);
    await rita.screenshot({ path: join(SCREENSHOTS, 'desk-review.png'), fullPage: true });

    rolf = await signedIn('reviewer', 'rolf');
    await rolf.goto(`${stack.webUrl}/qc`);
    const held = rolf.getByRole('row').filter({ has: rolf.getByRole('link', { name: 'Friedhof am Weinberg' }) });
    await expect.poll(() => held.textContent()).toContain('Wird gerade von rita geprüft');
    await rolf.screenshot({ path: join(SCREENSHOTS, 'desk-queue.png'), fullPage: true });
    await rolf.getByRole('link', { name: 'Friedhof am Weinberg' }).click();
    await expect.poll(() => rolf.getByRole('status').filter({ hasText: 'Keine Reservierung' }).textContent()).toContain('rita');
    expect(await rolf.getByRole('button', { name: 'Freigeben' }).count()).toBe(0);
    await audit(rolf);
    expect(violations).toEqual([]);
  });

  it('the first reviewer rejects with a common reason picked and edited by keyboard; letters typed in the reason are text, not shortcuts', async () => {
    const url = rita.url();
    await rita.goto(`${url}?lang=en`);
    for (const name of ['Approve', 'Reject', 'Next']) await rita.getByRole('button', { name, exact: true }).waitFor({ state: 'visible' });
    await rita.getByLabel('Reason', { exact: true }).waitFor({ state: 'visible' });
    await rita.goto(`${url}?lang=de`);
    await expect.poll(() => rita.getByRole('status').filter({ hasText: 'Sie prüfen dieses Objekt' }).count()).toBe(1);

    await rita.getByRole('heading', { level: 1 }).click(); // focus on the page, not in a field
    await rita.keyboard.press('?');
    await rita.getByRole('dialog', { name: 'Tastenkürzel' }).waitFor({ state: 'visible' });
    await audit(rita);
    await rita.keyboard.press('Escape');
    await rita.getByRole('dialog', { name: 'Tastenkürzel' }).waitFor({ state: 'hidden' });

    await rita.keyboard.press('r');
    await expect.poll(() => isFocused(rita.getByLabel('Häufige Gründe'))).toBe(true);
    await rita.keyboard.press('ArrowDown');
    await rita.keyboard.press('Tab');
    await expect.poll(() => isFocused(rita.getByLabel('Begründung', { exact: true }))).toBe(true);
    expect(await rita.getByLabel('Begründung', { exact: true }).inputValue()).toBe('Adresse fehlt oder ist falsch.');
    await rita.keyboard.press('End');
    await rita.keyboard.type(' Bitte Hausnummer angeben.');
    await rita.keyboard.press('Tab');
    await expect.poll(() => isFocused(rita.getByRole('button', { name: 'Ablehnen' }))).toBe(true);
    expect((await reviews(cemetery)).status).toBe('in_qc'); // the 'a' and 'n' typed above did nothing
    await rita.keyboard.press('Enter');
    await expect.poll(() => rita.getByRole('status').filter({ hasText: 'Abgelehnt.' }).count()).toBe(1);
    const rejected = await reviews(cemetery);
    expect(rejected.status).toBe('rejected');
    expect(rejected.transitions.at(-1)).toMatchObject({ action: 'reject', actor: 'rita', comment: 'Adresse fehlt oder ist falsch. Bitte Hausnummer angeben.' });
    expect(violations).toEqual([]);
  });

  it('the contributor sees the reason on her submissions and on the feature, fixes the feature and submits it again', async () => {
    await alice.goto(`${stack.webUrl}/qc/mine`);
    const row = alice.getByRole('row').filter({ has: alice.getByRole('link', { name: 'Friedhof am Weinberg' }) });
    await expect.poll(() => row.textContent()).toContain('Abgelehnt von rita: Adresse fehlt oder ist falsch. Bitte Hausnummer angeben.');
    await alice.getByRole('link', { name: 'Friedhof am Weinberg' }).click();
    await expect.poll(() => alice.getByRole('note').textContent()).toContain('Adresse fehlt oder ist falsch. Bitte Hausnummer angeben.');
    await audit(alice);
    await alice.getByRole('link', { name: 'Bearbeiten' }).click();
    await alice.waitForURL(/\/edit$/);
    await alice.getByLabel('Adresse').fill('Weinbergweg 12');
    await alice.getByRole('button', { name: 'Speichern' }).click();
    await alice.waitForURL((url) => url.pathname === `/features/${cemetery}`);
    expect(await alice.getByRole('note').count()).toBe(0); // the edit reopened it: no longer rejected
    await alice.getByLabel('Kommentar zur Einreichung').fill('Hausnummer ergänzt');
    await alice.getByRole('button', { name: 'Zur Prüfung einreichen' }).click();
    await expect.poll(() => alice.getByRole('status').filter({ hasText: 'Eingereicht' }).count()).toBe(1);
    const again = await reviews(cemetery);
    expect(again.status).toBe('in_qc');
    expect(again.transitions.at(-1)).toMatchObject({ action: 'submit', comment: 'Hausnummer ergänzt' });
    expect(violations).toEqual([]);
  });

  it('the second reviewer approves with the keyboard and the desk shows the export jobs as skipped, with the reasons', async () => {
    await rolf.goto(`${stack.webUrl}/qc/${encodeURIComponent(cemetery)}`);
    await expect.poll(() => rolf.getByRole('status').filter({ hasText: 'Sie prüfen dieses Objekt' }).count()).toBe(1);
    expect(await rolf.getByRole('blockquote').textContent()).toBe('Hausnummer ergänzt');
    await rolf.getByRole('heading', { level: 1 }).click();
    await rolf.keyboard.press('a');
    await expect.poll(() => rolf.getByRole('status').filter({ hasText: 'Freigegeben.' }).count()).toBe(1);
    const jobs = rolf.getByRole('table', { name: 'Exportaufträge nach der Entscheidung' });
    await expect.poll(() => jobs.getByRole('row').filter({ hasText: 'übersprungen' }).count(), { timeout: 30_000 }).toBe(3);
    const done = await reviews(cemetery);
    expect(done.status).toBe('approved');
    const exportJobs = done.jobs.filter((job) => job.task !== 'reviewer_notice');
    expect(exportJobs.map((job) => [job.task, job.status]).sort()).toEqual([['agency_notice', 'skipped'], ['osm_export', 'skipped'], ['wikibase_export', 'skipped']]);
    for (const job of exportJobs) {
      expect(job.reason).toBeTruthy();
      const label = { osm_export: 'OpenStreetMap', wikibase_export: 'Wikidata/Wikibase', agency_notice: 'Meldung an die Behörde' }[job.task]!;
      const row = jobs.getByRole('row').filter({ has: rolf.getByRole('rowheader', { name: label }) });
      expect(await row.textContent()).toContain(job.reason!);
    }
    await audit(rolf);
    await rolf.screenshot({ path: join(SCREENSHOTS, 'desk-jobs.png'), fullPage: true });
    expect(await rolf.getByRole('button', { name: 'Erneut ausführen: OpenStreetMap' }).count()).toBe(0); // re-runs are for admins

    const admin = await signedIn('admin', 'ada');
    await admin.goto(`${stack.webUrl}/qc/${encodeURIComponent(cemetery)}`);
    await admin.getByRole('button', { name: 'Erneut ausführen: OpenStreetMap' }).click();
    await expect.poll(async () => (await stack.api<{ jobs: Array<{ task: string; reruns: number; rerunBy: string | null }> }>('GET', `/api/features/${encodeURIComponent(cemetery)}/reviews`)).body.jobs.find((job) => job.task === 'osm_export')).toMatchObject({ reruns: 1, rerunBy: 'ada' });
    const adminJobs = admin.getByRole('table', { name: 'Exportaufträge nach der Entscheidung' });
    await expect.poll(() => adminJobs.getByRole('row').filter({ hasText: 'übersprungen' }).count(), { timeout: 30_000 }).toBe(3);
    await audit(admin);
    expect(violations).toEqual([]);
  });

  it("a reviewer's own submission cannot be decided there, and the desk says why (four-eyes)", async () => {
    const own = await createFeature('rita', 'Blumenbeet am Rathaus', 'blumenbeet', 13.403);
    expect((await stack.api('POST', '/api/qc/submit', { token: tokens.rita, body: { featureId: own } })).status).toBe(200);
    await rita.goto(`${stack.webUrl}/qc/${encodeURIComponent(own)}`);
    await expect.poll(() => rita.getByRole('note').textContent()).toMatch(/selbst eingereicht.*Vier-Augen-Prinzip/);
    expect(await rita.getByRole('button', { name: 'Freigeben' }).count()).toBe(0);
    expect(await rita.getByRole('button', { name: 'Ablehnen' }).count()).toBe(0);
    await rita.getByRole('heading', { level: 1 }).click();
    await rita.keyboard.press('a');
    await rita.waitForTimeout(300);
    expect((await reviews(own)).status).toBe('in_qc');
    await audit(rita);
    await rita.screenshot({ path: join(SCREENSHOTS, 'desk-four-eyes.png') });
    // "Next" skips her own submission and whatever someone else holds: the monument is next.
    await rita.keyboard.press('n');
    await rita.waitForURL((url) => url.pathname === `/qc/${monument}`);
    expect(violations).toEqual([]);
  });

  it('two reviewers on two desks opening the same item at once never decide it twice', async () => {
    const target = `${stack.webUrl}/qc/${encodeURIComponent(monument)}`;
    await Promise.all([rita.goto(target), rolf.goto(target)]);
    const holding = async (page: Page) => page.getByRole('status').filter({ hasText: 'Sie prüfen dieses Objekt' }).count();
    const refused = async (page: Page) => page.getByRole('status').filter({ hasText: 'Keine Reservierung' }).count();
    await expect.poll(async () => (await holding(rita)) + (await holding(rolf)) + (await refused(rita)) + (await refused(rolf))).toBe(2);
    expect((await holding(rita)) + (await holding(rolf))).toBe(1);
    // Both press "approve" at the same moment; only the claim holder's desk offers it, and the API enforces the claim.
    await Promise.all([rita, rolf].map(async (page) => {
      await page.getByRole('heading', { level: 1 }).click();
      await page.keyboard.press('a');
    }));
    await expect.poll(async () => (await rita.getByRole('status').filter({ hasText: 'Freigegeben.' }).count()) + (await rolf.getByRole('status').filter({ hasText: 'Freigegeben.' }).count())).toBe(1);
    const decided = await reviews(monument);
    expect(decided.status).toBe('approved');
    expect(decided.transitions.filter((transition) => transition.action === 'approve' || transition.action === 'reject')).toHaveLength(1);
    // And at the API itself: a second decision on the decided item is refused.
    expect((await stack.api('POST', `/api/qc/approve/${encodeURIComponent(monument)}`, { token: tokens.rolf })).status).toBe(409);
    expect(violations).toEqual([]);
  });

  it('the queue count in the navigation follows a decision and a new submission without a reload, and "next" shows the next item in place, claimed', async () => {
    const submit = async (owner: string, name: string, lon: number) => {
      const id = await createFeature(owner, name, 'friedhof', lon);
      expect((await stack.api('POST', '/api/qc/submit', { token: tokens[owner], body: { featureId: id } })).status).toBe(200);
      return id;
    };
    const first = await submit('alice', 'Friedhof Zählung Eins', 13.41);
    await submit('alice', 'Friedhof Zählung Zwei', 13.411);
    const count = async () => (await stack.api<{ count: number }>('GET', '/api/qc/queue/count', { token: tokens.rolf })).body.count;
    const waiting = await count();
    const reviewer = await signedIn('reviewer', 'rolf');
    const nav = (n: number) => reviewer.getByRole('navigation', { name: 'Hauptnavigation' }).getByRole('link', { name: `Prüfung (${n} offen)` });
    // The page's clock is Playwright's (it runs at the real pace until moved), so the 15 s poll below
    // is brought forward instead of waited for.
    await reviewer.clock.install();
    await reviewer.goto(`${stack.webUrl}/qc/${encodeURIComponent(first)}`);
    await expect.poll(() => reviewer.getByRole('status').filter({ hasText: 'Sie prüfen dieses Objekt' }).count()).toBe(1);
    expect(await nav(waiting).count()).toBe(1);
    // A marker in the page's own JavaScript: it survives only if no navigation happens.
    await reviewer.evaluate(() => ((window as unknown as { deskMarker: string }).deskMarker = 'same page'));

    await reviewer.getByRole('heading', { level: 1 }).click();
    await reviewer.keyboard.press('a');
    await expect.poll(() => reviewer.getByRole('status').filter({ hasText: 'Freigegeben.' }).count()).toBe(1);
    await expect.poll(() => nav(waiting - 1).count()).toBe(1);

    // Someone else submits meanwhile: the open page learns of it by itself (it polls the count; no
    // message reaches it from an API call, and the page stays visible). The poll's interval is moved
    // forward: fastForward fires a due timer once, so this is one poll, not a burst of them.
    await submit('bob', 'Friedhof Zählung Drei', 13.412);
    await reviewer.clock.fastForward(15_000);
    await expect.poll(() => nav(waiting).count(), { timeout: 10_000 }).toBe(1);

    await reviewer.keyboard.press('n');
    await reviewer.waitForURL((url) => url.pathname.startsWith('/qc/') && url.pathname !== `/qc/${encodeURIComponent(first)}`);
    await expect.poll(() => reviewer.getByRole('status').filter({ hasText: 'Sie prüfen dieses Objekt' }).count()).toBe(1);
    expect(await reviewer.evaluate(() => (window as unknown as { deskMarker?: string }).deskMarker)).toBe('same page');
    const shown = decodeURIComponent(new URL(reviewer.url()).pathname.split('/').pop()!);
    const heading = await reviewer.getByRole('heading', { level: 1 }).textContent();
    const item = (await stack.api<{ feature: { properties: { name: string } }; claim: { holder: string } | null }>('GET', `/api/qc/items/${encodeURIComponent(shown)}`, { token: tokens.rolf })).body;
    expect(heading).toContain(item.feature.properties.name);
    expect(item.claim?.holder).toBe('rolf');
    // The item shown in place is a working desk: it is decided with the keyboard like any other.
    await reviewer.getByRole('heading', { level: 1 }).click();
    await reviewer.keyboard.press('a');
    await expect.poll(() => reviewer.getByRole('status').filter({ hasText: 'Freigegeben.' }).count()).toBe(1);
    expect((await reviews(shown)).status).toBe('approved');
    await audit(reviewer);
    expect(violations).toEqual([]);
  }, 120_000);
});
