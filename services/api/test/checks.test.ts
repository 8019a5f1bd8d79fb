import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';
import { startSmtpDouble, type SmtpDouble } from '../../shared/testing/smtp.js';
import { loadApiConfig } from '../src/config.js';
import { startWorker, waitFor } from './qc-harness.js';

/**
 * The review view over HTTP: GET /api/qc/items/:id with the checks computed by PostGIS (spike, tiny
 * polygon, sliver, outside the configured city, duplicate candidate, denkmal without address), the
 * last approved version and the diff against it; GET /api/qc/mine; and the reviewer notice's link to
 * the item on the desk (WEB_PUBLIC_URL).
 */
const token: Record<string, string> = {};
const BERLIN = { minLon: 13.08, minLat: 52.33, maxLon: 13.77, maxLat: 52.68 };
const { db, api } = useTestApi({ queue: true, config: { qc: { maxAttempts: 3, cityExtent: BERLIN } } });

beforeAll(async () => {
  token.conny = await api.tokenFor('contributor', 'conny');
  token.carl = await api.tokenFor('contributor', 'carl');
  token.rita = await api.tokenFor('reviewer', 'rita');
  token.guest = await api.tokenFor('guest', 'gina');
});

const polygon = (ring: number[][]) => ({ type: 'Polygon', coordinates: [ring] });
async function create(geometry: unknown, properties: Record<string, unknown> = {}, who = 'conny'): Promise<string> {
  const created = await api.request('POST', '/api/features', { token: token[who], body: aFeature({ geometry, properties }) });
  expect(created.status, created.text).toBe(201);
  return created.json.id as string;
}
async function checksOf(id: string): Promise<{ code: string; message: string; details: Record<string, unknown> }[]> {
  const item = await api.request('GET', `/api/qc/items/${id}`, { token: token.rita });
  expect(item.status, item.text).toBe(200);
  return item.json.checks;
}
const codes = async (id: string) => (await checksOf(id)).map((c) => c.code);

describe('review checks', () => {
  it('a plain feature inside the city has no checks', async () => {
    expect(await checksOf(await create({ type: 'Point', coordinates: [13.39, 52.49] }))).toEqual([]);
  });

  it('finds a spike: a vertex where the edges fold back at a few degrees', async () => {
    // A square of about 70 m with a 1 km needle pointing north between two vertices 7 m apart.
    const id = await create(polygon([[13.4, 52.5], [13.401, 52.5], [13.401, 52.501], [13.4005, 52.51], [13.4004, 52.501], [13.4, 52.501], [13.4, 52.5]]));
    const [spike, ...rest] = await checksOf(id);
    expect(rest).toEqual([]);
    expect(spike).toMatchObject({ code: 'spike', details: { vertex: 4, coordinates: [13.4005, 52.51] } });
    expect(spike!.details.angleDegrees as number).toBeLessThan(5);
  });

  it('a square has no spike, and neither has a straight line', async () => {
    expect(await codes(await create(polygon([[13.41, 52.5], [13.411, 52.5], [13.411, 52.501], [13.41, 52.501], [13.41, 52.5]])))).toEqual([]);
    expect(await codes(await create({ type: 'LineString', coordinates: [[13.41, 52.51], [13.42, 52.51], [13.43, 52.51]] }))).toEqual([]);
  });

  it('finds a line that doubles back on itself as a spike', async () => {
    expect(await codes(await create({ type: 'LineString', coordinates: [[13.41, 52.52], [13.42, 52.52], [13.41, 52.5201]] }))).toEqual(['spike']);
  });

  it('finds a tiny polygon and a sliver', async () => {
    // About 0.5 m × 0.5 m.
    const tiny = await checksOf(await create(polygon([[13.42, 52.5], [13.420007, 52.5], [13.420007, 52.5000045], [13.42, 52.5000045], [13.42, 52.5]])));
    expect(tiny.map((c) => c.code)).toEqual(['tiny_area']);
    expect(tiny[0]!.details.areaM2 as number).toBeLessThan(1);
    // About 100 m × 0.5 m.
    const sliver = await checksOf(await create(polygon([[13.43, 52.5], [13.4315, 52.5], [13.4315, 52.5000045], [13.43, 52.5000045], [13.43, 52.5]])));
    expect(sliver.map((c) => c.code)).toEqual(['sliver']);
    expect(sliver[0]!.details.thinness as number).toBeLessThan(0.05);
  });

  it('finds each part of a MultiPolygon on its own', async () => {
    const id = await create({
      type: 'MultiPolygon',
      coordinates: [
        [[[13.44, 52.5], [13.441, 52.5], [13.441, 52.501], [13.44, 52.501], [13.44, 52.5]]],
        [[[13.45, 52.5], [13.450007, 52.5], [13.450007, 52.5000045], [13.45, 52.5000045], [13.45, 52.5]]],
      ],
    });
    expect(await checksOf(id)).toEqual([expect.objectContaining({ code: 'tiny_area', details: expect.objectContaining({ part: 2 }) })]);
  });

  it('finds a point far outside the configured city extent, with its distance', async () => {
    const [check] = await checksOf(await create({ type: 'Point', coordinates: [11.58, 48.14] }));
    expect(check).toMatchObject({ code: 'outside_city', details: { cityExtent: [13.08, 52.33, 13.77, 52.68] } });
    expect(check!.details.distanceKm as number).toBeGreaterThan(400);
    expect(check!.details.distanceKm as number).toBeLessThan(600);
  });

  it('finds a duplicate candidate: same kategorie, a few metres away, a similar name — and nothing else', async () => {
    const original = await create({ type: 'Point', coordinates: [13.46, 52.5] }, { name: 'Alter Friedhof Pankow', kategorie: 'friedhof' });
    await create({ type: 'Point', coordinates: [13.46004, 52.50002] }, { name: 'Rosengarten', kategorie: 'friedhof' }); // other name
    await create({ type: 'Point', coordinates: [13.46003, 52.5] }, { name: 'Alter Friedhof Pankow', kategorie: 'denkmal', adresse: 'Breite Str. 1' }); // other kategorie
    await create({ type: 'Point', coordinates: [13.4615, 52.5] }, { name: 'Alter Friedhof Pankow', kategorie: 'friedhof' }); // 100 m away
    const candidate = await create({ type: 'Point', coordinates: [13.46005, 52.50001] }, { name: 'Alter Friedhof (Pankow)', kategorie: 'friedhof' }, 'carl');

    const checks = await checksOf(candidate);
    expect(checks).toHaveLength(1);
    expect(checks[0]).toMatchObject({ code: 'duplicate_candidate', details: { featureId: original, name: 'Alter Friedhof Pankow' } });
    expect(checks[0]!.details.distanceM as number).toBeLessThan(10);
    expect(checks[0]!.details.nameSimilarity as number).toBeGreaterThanOrEqual(0.4);
  });

  it('finds a denkmal without an address, but not a friedhof without one', async () => {
    expect(await codes(await create({ type: 'Point', coordinates: [13.47, 52.5] }, { name: 'Bismarck', kategorie: 'denkmal' }))).toEqual(['missing_address']);
    expect(await codes(await create({ type: 'Point', coordinates: [13.47, 52.51] }, { name: 'Bismarck', kategorie: 'denkmal', adresse: 'Großer Stern 1' }))).toEqual([]);
    expect(await codes(await create({ type: 'Point', coordinates: [13.47, 52.52] }, { name: 'Kirchhof', kategorie: 'friedhof' }))).toEqual([]);
  });

  it('the checks do not block a decision', async () => {
    const id = await create({ type: 'Point', coordinates: [11.58, 48.14] }, { name: 'Weit weg', kategorie: 'denkmal' });
    expect((await codes(id)).sort()).toEqual(['missing_address', 'outside_city']);
    expect((await api.request('POST', '/api/qc/submit', { token: token.conny, body: { featureId: id } })).status).toBe(200);
    expect((await api.request('POST', `/api/qc/approve/${id}`, { token: token.rita })).status).toBe(200);
  });
});

describe('the review item', () => {
  it('shows the submission, the claim, and the last approved version with the diff against it', async () => {
    const id = await create({ type: 'Point', coordinates: [13.48, 52.5] }, { name: 'Friedhof Alt', kategorie: 'friedhof' });
    const first = await api.request('GET', `/api/qc/items/${id}`, { token: token.rita });
    expect(first.json).toMatchObject({ featureId: id, status: 'draft', version: 1, submission: null, claim: null, lastApproved: null, diff: [], geometryChanged: null });

    expect((await api.request('POST', '/api/qc/submit', { token: token.conny, body: { featureId: id } })).status).toBe(200);
    expect((await api.request('POST', `/api/qc/approve/${id}`, { token: token.rita })).status).toBe(200);
    const current = await api.request('GET', `/api/features/${id}`);
    const edited = await api.request('PUT', `/api/features/${id}`, {
      token: token.conny,
      body: { ...current.json, properties: { name: 'Friedhof Neu', kategorie: 'friedhof', adresse: 'Hauptstr. 5' } },
    });
    expect(edited.status).toBe(200);
    expect((await api.request('POST', '/api/qc/submit', { token: token.conny, body: { featureId: id, comment: 'Name korrigiert' } })).status).toBe(200);
    expect((await api.request('POST', `/api/qc/claim/${id}`, { token: token.rita })).status).toBe(200);

    const item = await api.request('GET', `/api/qc/items/${id}`, { token: token.rita });
    expect(item.json).toMatchObject({
      status: 'in_qc',
      version: 2,
      feature: { id, properties: { name: 'Friedhof Neu' } },
      submission: { actor: 'conny', comment: 'Name korrigiert', version: 2 },
      claim: { holder: 'rita' },
      lastApproved: { version: 1, actor: 'rita', feature: { id, geometry: { type: 'Point', coordinates: [13.48, 52.5] }, properties: { name: 'Friedhof Alt' } } },
      diff: [
        { field: 'name', before: 'Friedhof Alt', after: 'Friedhof Neu' },
        { field: 'adresse', before: null, after: 'Hauptstr. 5' },
      ],
      geometryChanged: false,
    });
  });

  it('answers 404 for a feature that does not exist, and is in the OpenAPI document', async () => {
    expect((await api.request('GET', '/api/qc/items/nope', { token: token.rita })).status).toBe(404);
    const doc = (await api.request('GET', '/api/openapi.json')).json;
    expect(doc.paths).toHaveProperty(['/api/qc/items/{id}']);
    expect(doc.paths).toHaveProperty(['/api/qc/mine']);
  });
});

describe('my submissions', () => {
  it('lists the caller\'s submissions, latest first, with status and the rejection reason', async () => {
    const fresh = await api.tokenFor('contributor', 'mona');
    const mk = async (name: string) => {
      const created = await api.request('POST', '/api/features', { token: fresh, body: aFeature({ properties: { name } }) });
      return created.json.id as string;
    };
    const rejected = await mk('Wird abgelehnt');
    const waiting = await mk('Wartet');
    await mk('Nie eingereicht');
    expect((await api.request('POST', '/api/qc/submit', { token: fresh, body: { featureId: rejected, comment: 'erste Fassung' } })).status).toBe(200);
    expect((await api.request('POST', `/api/qc/reject/${rejected}`, { token: token.rita, body: { reason: 'Die Adresse fehlt' } })).status).toBe(200);
    expect((await api.request('POST', '/api/qc/submit', { token: fresh, body: { featureId: waiting } })).status).toBe(200);

    const mine = await api.request('GET', '/api/qc/mine', { token: fresh });
    expect(mine.status).toBe(200);
    expect(mine.json.items).toMatchObject([
      { featureId: waiting, name: 'Wartet', status: 'in_qc', decision: null, rejectionReason: null },
      { featureId: rejected, name: 'Wird abgelehnt', status: 'rejected', comment: 'erste Fassung', decision: { action: 'reject', actor: 'rita', comment: 'Die Adresse fehlt' }, rejectionReason: 'Die Adresse fehlt' },
    ]);
    // Another contributor sees only their own.
    const others = (await api.request('GET', '/api/qc/mine', { token: token.carl })).json.items as { featureId: string }[];
    expect(others.map((i) => i.featureId)).not.toContain(waiting);
  });

  it('needs a role that submits', async () => {
    expect((await api.request('GET', '/api/qc/mine')).status).toBe(401);
    expect((await api.request('GET', '/api/qc/mine', { token: token.guest })).status).toBe(403);
    expect((await api.request('GET', '/api/qc/mine?limit=0', { token: token.conny })).status).toBe(400);
  });
});

describe('the reviewer notice', () => {
  let smtp: SmtpDouble;
  let worker: Awaited<ReturnType<typeof startWorker>> | undefined;
  afterAll(async () => {
    await worker?.stop();
    await smtp?.stop();
  });

  it('links to the item on the QC desk at WEB_PUBLIC_URL/qc/{featureId}', async () => {
    smtp = await startSmtpDouble();
    worker = await startWorker(db, { SMTP_URL: smtp.url, REVIEWER_EMAILS: 'qc@example.org', WEB_PUBLIC_URL: 'https://karte.example.org/' });
    const id = await create({ type: 'Point', coordinates: [13.49, 52.5] }, { name: 'Mit Link' });
    expect((await api.request('POST', '/api/qc/submit', { token: token.conny, body: { featureId: id } })).status).toBe(200);
    // Earlier tests' submissions are delivered too; this one's is the mail about "Mit Link".
    const mail = await waitFor('the notice of "Mit Link"', async () => smtp.messages.find((m) => m.subject.includes('Mit Link')), 30_000);
    expect(mail.text).toContain(`Review it here: https://karte.example.org/qc/${id}`);
  });
});

describe('configuration', () => {
  it('reads the city extent from QC_CITY_EXTENT and refuses a malformed one by name', () => {
    expect(loadApiConfig({ QC_CITY_EXTENT: '13.08,52.33,13.77,52.68' }).qc.cityExtent).toEqual(BERLIN);
    expect(loadApiConfig({}).qc.cityExtent).toBeUndefined();
    expect(() => loadApiConfig({ QC_CITY_EXTENT: '13.08,52.33,13.77' })).toThrow(/QC_CITY_EXTENT/);
    expect(() => loadApiConfig({ QC_CITY_EXTENT: '14,52,13,53' })).toThrow(/QC_CITY_EXTENT/);
  });

  it('links the reviewer notice to the desk of WEB_PUBLIC_URL unless QC_REVIEW_LINK says otherwise', () => {
    expect(loadApiConfig({}).exports.reviewers.reviewLink).toBe('http://localhost:4321/qc/{featureId}');
    expect(loadApiConfig({ QC_REVIEW_LINK: 'https://intern.example.org/review/{featureId}' }).exports.reviewers.reviewLink).toBe('https://intern.example.org/review/{featureId}');
    expect(() => loadApiConfig({ WEB_PUBLIC_URL: 'karte' })).toThrow(/WEB_PUBLIC_URL/);
  });
});
