import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMediaWikiDouble, type MediaWikiDouble } from '../../shared/testing/mediawiki-api.js';
import { SEED_CATEGORY_MAPPING } from '../src/exports/category-mapping.js';
import type { WikibaseCredentials } from '../src/exports/config.js';
import { RetryableExportError } from '../src/exports/errors.js';
import { createMemoryJournal } from '../src/exports/journal.js';
import type { ExportOutcome, FeatureGeometry, FeatureSnapshot } from '../src/exports/types.js';
import { testExportsSettings } from './exports-settings.js';
import { WikibaseExporter, type WikibaseExportRecord } from '../src/exports/wikibase/exporter.js';

const UA = 'feature-mapping-platform-tests/1.0';
const BOT = { username: 'Exporter@qc', password: 'bot-password-123' };

let wiki: MediaWikiDouble;
beforeAll(async () => {
  wiki = await startMediaWikiDouble({ seedItems: ['Q39614', 'Q4989906', 'Q5'] });
});
afterAll(() => wiki.close());

function exporter(overrides: { url?: string | undefined; credentials?: WikibaseCredentials | undefined; timeoutMs?: number } = {}): WikibaseExporter {
  const base = testExportsSettings({ EXPORT_USER_AGENT: UA, EXPORT_HTTP_TIMEOUT_MS: String(overrides.timeoutMs ?? 5000), OSM_CONFLATION: 'false' });
  return new WikibaseExporter({
    // These tests are about creating and updating items; conflation has its own (conflation.test.ts).
    settings: {
      ...base,
      wikibase: {
        ...base.wikibase,
        instanceUrl: 'url' in overrides ? overrides.url : wiki.url,
        credentials: 'credentials' in overrides ? overrides.credentials : BOT,
      },
    },
    mapping: SEED_CATEGORY_MAPPING,
  });
}

let counter = 0;
function snapshot(extra: Partial<FeatureSnapshot> = {}): FeatureSnapshot {
  counter++;
  const geometry: FeatureGeometry = { type: 'Polygon', coordinates: [[[13.0, 52.0], [13.002, 52.0], [13.002, 52.001], [13.0, 52.001], [13.0, 52.0]]] };
  return { id: `10000000-0000-4000-8000-${String(counter).padStart(12, '0')}`, version: 1, name: `Friedhof ${counter}`, kategorie: 'friedhof', geometry, ...extra };
}

function exported(outcome: ExportOutcome<WikibaseExportRecord>): WikibaseExportRecord {
  if (outcome.status !== 'exported') throw new Error(`expected exported, got ${JSON.stringify(outcome)}`);
  return outcome.result;
}

const edits = () => wiki.requests.filter((r) => r.params.action === 'wbeditentity');
const valueOf = (item: { claims: Record<string, { mainsnak: { datavalue?: { value: unknown } } }[]> }, property: string) => item.claims[property]?.map((s) => s.mainsnak.datavalue?.value);

describe('creating an item', () => {
  it('logs in, creates an item with label, P31 class and P625 centroid, and names the intent in the summary', async () => {
    const feature = snapshot();
    const journal = createMemoryJournal();
    const editsBefore = edits().length;
    const record = exported(await exporter().export({ snapshot: feature, previous: null, journal }));

    const item = wiki.items.get(record.itemId)!;
    expect(item.labels).toEqual({ de: { language: 'de', value: feature.name } });
    expect(valueOf(item, 'P31')).toEqual([{ 'entity-type': 'item', id: 'Q39614' }]);
    expect(valueOf(item, 'P625')).toEqual([{ latitude: 52.0005, longitude: 13.001, precision: 0.000001, globe: 'http://www.wikidata.org/entity/Q2' }]);
    expect(record.revisionId).toBe(item.lastrevid);

    expect(edits().length).toBe(editsBefore + 1);
    const edit = edits().at(-1)!;
    expect(edit.method).toBe('POST');
    expect(edit.params).toMatchObject({ new: 'item', assert: 'user', maxlag: '5' });
    expect(edit.params.summary).toContain(`[${journal.entries.intent}]`);
    expect(journal.entries.intent).toMatch(new RegExp(`^fmp-export:${feature.id}:v1:[0-9a-f]{8}$`));
    expect(edit.headers['user-agent']).toBe(UA);
    expect(wiki.contributions.at(-1)).toMatchObject({ user: 'Exporter', title: `Item:${record.itemId}` });
  });

  it('works with an OAuth2 token instead of a bot password (no login round trip)', async () => {
    const logins = wiki.requests.filter((r) => r.params.action === 'login').length;
    const oauthExporter = exporter({ credentials: { oauth2Token: 'wiki-oauth2-token' } });
    const record = exported(await oauthExporter.export({ snapshot: snapshot({ kategorie: 'denkmal', geometry: { type: 'Point', coordinates: [6.96, 50.94] } }), previous: null, journal: createMemoryJournal() }));
    expect(valueOf(wiki.items.get(record.itemId)!, 'P31')).toEqual([{ 'entity-type': 'item', id: 'Q4989906' }]);
    expect(valueOf(wiki.items.get(record.itemId)!, 'P625')).toEqual([expect.objectContaining({ latitude: 50.94, longitude: 6.96 })]);
    expect(wiki.requests.filter((r) => r.params.action === 'login').length).toBe(logins);
    expect(edits().at(-1)!.headers.authorization).toBe('Bearer wiki-oauth2-token');
  });
});

describe('updating the item created before', () => {
  it('changes label and coordinates of the same item, keeps statements it does not manage', async () => {
    const first = snapshot();
    const previous = exported(await exporter().export({ snapshot: first, previous: null, journal: createMemoryJournal() }));
    // Someone adds an extra class on the wiki; it is not ours, so it must survive.
    wiki.items.get(previous.itemId)!.claims.P31!.push({ id: `${previous.itemId}$EXTRA`, type: 'statement', rank: 'normal', mainsnak: { snaktype: 'value', property: 'P31', datavalue: { type: 'wikibase-entityid', value: { 'entity-type': 'item', id: 'Q5' } } } });
    const oldCoordinateId = wiki.items.get(previous.itemId)!.claims.P625![0]!.id;
    const itemsBefore = wiki.createdItems().length;

    const second = { ...first, version: 2, name: 'Neuer Name', geometry: { type: 'Point', coordinates: [13.5, 52.5] } as FeatureGeometry };
    const record = exported(await exporter().export({ snapshot: second, previous, journal: createMemoryJournal() }));

    expect(record.itemId).toBe(previous.itemId);
    expect(wiki.createdItems().length).toBe(itemsBefore);
    const item = wiki.items.get(record.itemId)!;
    expect(item.labels.de!.value).toBe('Neuer Name');
    expect(valueOf(item, 'P31')).toEqual([{ 'entity-type': 'item', id: 'Q39614' }, { 'entity-type': 'item', id: 'Q5' }]);
    expect(valueOf(item, 'P625')).toEqual([expect.objectContaining({ latitude: 52.5, longitude: 13.5 })]);
    expect(item.claims.P625![0]!.id).not.toBe(oldCoordinateId);
    const edit = edits().at(-1)!;
    expect(edit.params.id).toBe(previous.itemId);
    expect(edit.params.new).toBeUndefined();
  });

  it('a category change swaps the managed class', async () => {
    const first = snapshot();
    const previous = exported(await exporter().export({ snapshot: first, previous: null, journal: createMemoryJournal() }));
    exported(await exporter().export({ snapshot: { ...first, version: 2, kategorie: 'denkmal' }, previous, journal: createMemoryJournal() }));
    expect(valueOf(wiki.items.get(previous.itemId)!, 'P31')).toEqual([{ 'entity-type': 'item', id: 'Q4989906' }]);
  });

  it('an item that already matches is left alone', async () => {
    const first = snapshot();
    const previous = exported(await exporter().export({ snapshot: first, previous: null, journal: createMemoryJournal() }));
    const editsBefore = edits().length;
    const outcome = await exporter().export({ snapshot: { ...first, version: 2 }, previous, journal: createMemoryJournal() });
    expect(outcome).toEqual({ status: 'unchanged', result: previous });
    expect(edits().length).toBe(editsBefore);
  });

  it('an item deleted on the wiki is a conflict for an admin', async () => {
    const first = snapshot();
    const previous = exported(await exporter().export({ snapshot: first, previous: null, journal: createMemoryJournal() }));
    wiki.items.get(previous.itemId)!.deleted = true;
    const outcome = await exporter().export({ snapshot: { ...first, version: 2 }, previous, journal: createMemoryJournal() });
    expect(outcome.status).toBe('conflict');
  });
});

describe('not applicable, skipped, failed, retryable', () => {
  it('a category without a class is not applicable and nothing is sent', async () => {
    const before = wiki.requests.length;
    const outcome = await exporter().export({ snapshot: snapshot({ kategorie: 'blumenbeet' }), previous: null, journal: createMemoryJournal() });
    expect(outcome).toEqual({ status: 'not_applicable', reason: 'category blumenbeet has no Wikidata class' });
    expect(wiki.requests.length).toBe(before);
  });

  it('without WIKIBASE_URL or credentials the export is skipped with the reason', async () => {
    expect(await exporter({ url: undefined }).export({ snapshot: snapshot(), previous: null, journal: createMemoryJournal() })).toEqual({ status: 'skipped', reason: 'WIKIBASE_URL is not set' });
    const outcome = await exporter({ credentials: undefined }).export({ snapshot: snapshot(), previous: null, journal: createMemoryJournal() });
    expect(outcome.status).toBe('skipped');
  });

  it('a wrong bot password is a permanent failure', async () => {
    const outcome = await exporter({ credentials: { username: 'Exporter@qc', password: 'wrong-password' } }).export({ snapshot: snapshot(), previous: null, journal: createMemoryJournal() });
    expect(outcome.status).toBe('failed');
    expect(outcome.status === 'failed' && outcome.reason).toContain('failed to login');
  });

  it('an unreachable wiki is retryable', async () => {
    await expect(exporter({ url: 'http://127.0.0.1:1' }).export({ snapshot: snapshot(), previous: null, journal: createMemoryJournal() })).rejects.toBeInstanceOf(RetryableExportError);
  });

  it('a 503 from the wiki during the edit is retryable, and the retry creates exactly one item', async () => {
    const feature = snapshot();
    const journal = createMemoryJournal();
    const itemsBefore = wiki.createdItems().length;
    const wb = exporter();
    wiki.injectFault({ action: 'wbeditentity', mode: 'status', status: 503 });
    await expect(wb.export({ snapshot: feature, previous: null, journal })).rejects.toBeInstanceOf(RetryableExportError);
    exported(await wb.export({ snapshot: feature, previous: null, journal }));
    expect(wiki.createdItems().length).toBe(itemsBefore + 1);
  });

  it('wikibase-edit retrying its token fetch without end is cut off by a deadline and handed back to the queue', async () => {
    // A wiki of its own: wikibase-edit keeps retrying in the background after the deadline.
    const flaky = await startMediaWikiDouble();
    try {
      flaky.injectFault({ action: 'query', when: (p) => p.meta === 'tokens', mode: 'status', status: 502, times: 1000 });
      const slow = new WikibaseExporter({
        settings: (() => {
          const base = testExportsSettings({ EXPORT_USER_AGENT: UA, EXPORT_HTTP_TIMEOUT_MS: '300', OSM_CONFLATION: 'false' });
          return { ...base, wikibase: { ...base.wikibase, instanceUrl: flaky.url, credentials: { oauth2Token: 'wiki-oauth2-token' } } };
        })(),
        mapping: SEED_CATEGORY_MAPPING,
      });
      const started = Date.now();
      await expect(slow.export({ snapshot: snapshot(), previous: null, journal: createMemoryJournal() })).rejects.toThrow('Wikibase did not answer within 1200 ms');
      expect(Date.now() - started).toBeLessThan(5000);
      expect(flaky.createdItems()).toHaveLength(0);
    } finally {
      await flaky.close();
    }
  });
});

describe('crash safety: no second item after a crash', () => {
  it('the wiki created the item but the answer was lost: the re-run finds it by its intent token', async () => {
    const feature = snapshot();
    const journal = createMemoryJournal();
    const itemsBefore = wiki.createdItems().length;
    wiki.injectFault({ action: 'wbeditentity', mode: 'drop-after-processing' });
    await expect(exporter().export({ snapshot: feature, previous: null, journal })).rejects.toBeInstanceOf(RetryableExportError);
    expect(wiki.createdItems().length).toBe(itemsBefore + 1); // the wiki did create it
    const editsAfterCrash = edits().length;

    const outcome = await exporter().export({ snapshot: feature, previous: null, journal });
    const record = exported(outcome);
    expect(outcome.status === 'exported' && outcome.detail).toContain(journal.entries.intent!);
    expect(wiki.createdItems().length).toBe(itemsBefore + 1);
    expect(edits().length).toBe(editsAfterCrash);
    expect(wiki.items.get(record.itemId)!.labels.de!.value).toBe(feature.name);
  });

  it('a run killed after recording its intent but before creating creates the item once on the re-run', async () => {
    const feature = snapshot();
    const journal = createMemoryJournal();
    const itemsBefore = wiki.createdItems().length;
    const dying = {
      ...journal,
      recordIntent: async (token: string) => {
        await journal.recordIntent(token);
        throw new Error('killed');
      },
    };
    await expect(exporter().export({ snapshot: feature, previous: null, journal: dying })).rejects.toThrow('killed');
    expect(wiki.createdItems().length).toBe(itemsBefore);
    exported(await exporter().export({ snapshot: feature, previous: null, journal }));
    expect(wiki.createdItems().length).toBe(itemsBefore + 1);
  });
});
