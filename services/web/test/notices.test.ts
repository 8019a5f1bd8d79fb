/**
 * People around a review, in a real headless Chromium against the real API on PostGIS: a reviewer
 * writes in the comment thread of a QC item (/qc/{id}), rejects the feature with a reason, and the
 * contributor finds the notice with the reason on /qc/mine — in English and in German — and answers in
 * the thread there.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, BrowserContext } from 'playwright-core';
import { launchChromium, missingForBrowserTests, openPage, seriousViolations, startWebStack, type WebStack } from './harness.js';

const missing = missingForBrowserTests();
if (missing) console.log(`skipping the notice and comment browser tests: ${missing}`);

describe.skipIf(missing !== undefined)('notices and the comment thread in a browser', () => {
  let stack: WebStack;
  let browser: Browser;
  const contexts: BrowserContext[] = [];
  const tokens: Record<string, string> = {};

  beforeAll(async () => {
    stack = await startWebStack();
    browser = await launchChromium();
    for (const [role, sub] of [['contributor', 'nina'], ['reviewer', 'rita']] as const) tokens[sub] = await stack.token(role, sub);
  }, 300_000);
  afterAll(async () => {
    for (const context of contexts) await context.close().catch(() => undefined);
    await browser?.close();
    await stack?.close();
  });

  it('a reviewer comments on the QC item and rejects it; the contributor reads the notice with the reason', async () => {
    const created = await stack.api<{ id: string }>('POST', '/api/features', { token: tokens.nina, body: { type: 'Feature', geometry: { type: 'Point', coordinates: [13.41, 52.52] }, properties: { name: 'Büste am Park', kategorie: 'denkmal' } } });
    expect(created.status).toBe(201);
    const id = created.body.id;
    expect((await stack.api('POST', '/api/qc/submit', { token: tokens.nina, body: { featureId: id } })).status).toBe(200);

    const reviewer = await openPage(browser, stack.webUrl, contexts, { role: 'reviewer', sub: 'rita' }, { locale: 'en-GB' });
    await reviewer.goto(`${stack.webUrl}/qc/${encodeURIComponent(id)}`);
    const thread = reviewer.getByRole('region', { name: 'Comments' });
    await thread.getByLabel('Comment', { exact: true }).fill('Please add a photo of the plaque.');
    await thread.getByRole('button', { name: 'Add comment' }).click();
    await expect.poll(() => thread.getByRole('listitem').allTextContents(), { timeout: 10_000 }).toEqual([expect.stringContaining('Please add a photo of the plaque.')]);
    // Saved: the page shows it again after a reload.
    await reviewer.reload();
    expect(await reviewer.getByRole('region', { name: 'Comments' }).getByRole('listitem').allTextContents()).toEqual([expect.stringContaining('Please add a photo of the plaque.')]);
    expect(await seriousViolations(reviewer)).toEqual([]);

    expect((await stack.api('POST', `/api/qc/reject/${encodeURIComponent(id)}`, { token: tokens.rita, body: { reason: 'The bust stands on the east side of the park.' } })).status).toBe(200);

    const contributor = await openPage(browser, stack.webUrl, contexts, { role: 'contributor', sub: 'nina' }, { locale: 'en-GB' });
    await contributor.goto(`${stack.webUrl}/qc/mine`);
    const notices = contributor.getByRole('region', { name: /^Notices/ });
    expect(await notices.getByRole('heading').textContent()).toBe('Notices (1 new)');
    const notice = (await notices.getByRole('listitem').allTextContents()).join('\n').replace(/\s+/g, ' ');
    expect(notice).toContain('Büste am Park');
    expect(notice).toMatch(/was rejected by rita on .*\. Reason: The bust stands on the east side of the park\./);
    // One link per feature on the page: the submissions table's.
    expect(await contributor.getByRole('link', { name: 'Büste am Park' }).getAttribute('href')).toBe(`/features/${encodeURIComponent(id)}`);
    expect(await seriousViolations(contributor)).toEqual([]);
    await notices.getByRole('button', { name: 'Mark all as read' }).click();
    await expect.poll(() => notices.getByRole('heading').textContent(), { timeout: 10_000 }).toBe('Notices');
    await contributor.reload();
    expect(await contributor.getByRole('region', { name: /^Notices/ }).getByRole('heading').textContent()).toBe('Notices');

    // The contributor's side of the thread: collapsed per submission on /qc/mine, loaded when opened.
    await contributor.getByText('Comments on Büste am Park').click();
    const mineThread = contributor.getByRole('group').filter({ hasText: 'Comments on Büste am Park' });
    await expect.poll(() => mineThread.getByRole('listitem').allTextContents(), { timeout: 10_000 }).toEqual([expect.stringContaining('Please add a photo of the plaque.')]);
    await mineThread.getByLabel('Comment', { exact: true }).fill('Photo follows tomorrow.');
    await mineThread.getByRole('button', { name: 'Add comment' }).click();
    await expect.poll(() => mineThread.getByRole('listitem').count(), { timeout: 10_000 }).toBe(2);
    const stored = await stack.api<{ items: Array<{ author: string; body: string }> }>('GET', `/api/qc/items/${encodeURIComponent(id)}/comments`, { token: tokens.rita });
    expect(stored.body.items.map((c) => `${c.author}: ${c.body}`)).toEqual(['rita: Please add a photo of the plaque.', 'nina: Photo follows tomorrow.']);

    const german = await openPage(browser, stack.webUrl, contexts, { role: 'contributor', sub: 'nina' });
    await german.goto(`${stack.webUrl}/qc/mine`);
    expect((await german.getByRole('region', { name: /^Mitteilungen/ }).getByRole('listitem').allTextContents()).join('\n').replace(/\s+/g, ' ')).toMatch(/wurde am .* von rita abgelehnt\. Begründung: The bust stands/);
  }, 120_000);
});
