import { beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';

/**
 * Idempotency-Key on POST /api/features over HTTP: replay of the first 201, 422 for another body,
 * per-caller scope, retention, concurrent duplicates, failed requests releasing their key, and a
 * create whose answer was never recorded (a crash) not being made twice.
 */
const { db, api } = useTestApi();
let alice: string;
let bob: string;

beforeAll(async () => {
  alice = await api.tokenFor('contributor', 'alice');
  bob = await api.tokenFor('contributor', 'bob');
});

const post = (token: string, key: string | undefined, body: unknown) =>
  api.request('POST', '/api/features', { token, body, headers: key === undefined ? {} : { 'Idempotency-Key': key } });
const countNamed = async (name: string) => Number((await db.pool.query(`SELECT count(*) FROM features.features WHERE name = $1`, [name])).rows[0].count);

describe('Idempotency-Key on POST /api/features', () => {
  it('the same key and body answer the first 201 again, with the same id, and create nothing more', async () => {
    const body = aFeature({ properties: { name: 'Einmal-Friedhof' } });
    const first = await post(alice, 'key-1', body);
    expect(first.status).toBe(201);
    const second = await post(alice, 'key-1', body);
    expect(second.status).toBe(201);
    expect(second.json.id).toBe(first.json.id);
    expect(second.text).toBe(first.text);
    expect(second.headers.get('location')).toBe(first.headers.get('location'));
    expect(second.headers.get('etag')).toBe(first.headers.get('etag'));
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(await countNamed('Einmal-Friedhof')).toBe(1);
  });

  it('the same body with its members in another order is the same request', async () => {
    const body = aFeature({ properties: { name: 'Reihenfolge', kategorie: 'denkmal' } });
    const first = await post(alice, 'key-order', body);
    const reordered = { properties: { kategorie: 'denkmal', name: 'Reihenfolge' }, geometry: body.geometry, type: 'Feature' };
    const second = await post(alice, 'key-order', reordered);
    expect(second.status).toBe(201);
    expect(second.json.id).toBe(first.json.id);
  });

  it('the same key with another body is refused with 422 and creates nothing', async () => {
    expect((await post(alice, 'key-2', aFeature({ properties: { name: 'Erster' } }))).status).toBe(201);
    const other = await post(alice, 'key-2', aFeature({ properties: { name: 'Zweiter' } }));
    expect(other.status).toBe(422);
    expect(other.headers.get('content-type')).toContain('application/problem+json');
    expect(other.json.code).toBe('IDEMPOTENCY_KEY_REUSED');
    expect(await countNamed('Zweiter')).toBe(0);
  });

  it('keys are scoped per caller: another caller\'s same key is a new request', async () => {
    const body = aFeature({ properties: { name: 'Zwei Aufrufer' } });
    const byAlice = await post(alice, 'shared-key', body);
    const byBob = await post(bob, 'shared-key', body);
    expect(byBob.status).toBe(201);
    expect(byBob.json.id).not.toBe(byAlice.json.id);
    expect(byBob.headers.get('idempotent-replayed')).toBeNull();
    expect(await countNamed('Zwei Aufrufer')).toBe(2);
  });

  it('keeps a key for at least 24 hours, and only then lets it be used again', async () => {
    const body = aFeature({ properties: { name: 'Aufbewahrt' } });
    const first = await post(alice, 'key-kept', body);
    const row = await db.pool.query(`SELECT expires_at - created_at AS kept FROM http.idempotency_keys WHERE caller = 'alice' AND key = 'key-kept'`);
    expect(row.rows[0].kept.hours ?? row.rows[0].kept.days * 24).toBeGreaterThanOrEqual(24);
    // 23 h later it still replays …
    await db.pool.query(`UPDATE http.idempotency_keys SET created_at = created_at - interval '23 hours', expires_at = expires_at - interval '23 hours' WHERE caller = 'alice' AND key = 'key-kept'`);
    expect((await post(alice, 'key-kept', body)).json.id).toBe(first.json.id);
    // … once expired, the key is free and the request is new.
    await db.pool.query(`UPDATE http.idempotency_keys SET expires_at = now() - interval '1 second' WHERE caller = 'alice' AND key = 'key-kept'`);
    const fresh = await post(alice, 'key-kept', body);
    expect(fresh.status).toBe(201);
    expect(fresh.json.id).not.toBe(first.json.id);
    expect(fresh.headers.get('idempotent-replayed')).toBeNull();
  });

  it('20 concurrent duplicates make one feature and all get its 201', async () => {
    const body = aFeature({ properties: { name: 'Gleichzeitig' } });
    const answers = await Promise.all(Array.from({ length: 20 }, () => post(alice, 'key-concurrent', body)));
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(201));
    expect(new Set(answers.map((a) => a.json.id)).size).toBe(1);
    expect(await countNamed('Gleichzeitig')).toBe(1);
  });

  it('a request that failed releases its key, so the corrected retry goes through', async () => {
    const bad = await post(alice, 'key-fix', aFeature({ properties: { name: 'x'.repeat(256) } }));
    expect(bad.status).toBe(400);
    const fixed = await post(alice, 'key-fix', aFeature({ properties: { name: 'Korrigiert' } }));
    expect(fixed.status).toBe(201);
    expect(await countNamed('Korrigiert')).toBe(1);
  });

  it('a create whose answer was never recorded (the process died) is answered with that feature on retry, not made twice', async () => {
    const body = aFeature({ properties: { name: 'Nach dem Absturz' } });
    const first = await post(alice, 'key-crash', body);
    expect(first.status).toBe(201);
    // As a crash between the insert and the recording leaves it: pending, its lease run out.
    await db.pool.query(
      `UPDATE http.idempotency_keys SET response_status = NULL, response_body = NULL, response_headers = NULL, locked_until = now() - interval '1 second'
       WHERE caller = 'alice' AND key = 'key-crash'`,
    );
    const retry = await post(alice, 'key-crash', body);
    expect(retry.status).toBe(201);
    expect(retry.json.id).toBe(first.json.id);
    expect(retry.headers.get('location')).toBe(first.headers.get('location'));
    expect(await countNamed('Nach dem Absturz')).toBe(1);
  });

  it('refuses a malformed key with 400 naming the header, and without a key every POST creates', async () => {
    const bad = await post(alice, 'ä'.repeat(3), aFeature());
    expect(bad.status).toBe(400);
    expect(bad.json.fields).toEqual([{ field: 'Idempotency-Key', message: expect.any(String) }]);
    expect((await post(alice, 'k'.repeat(256), aFeature())).status).toBe(400);
    const body = aFeature({ properties: { name: 'Ohne Schlüssel' } });
    await post(alice, undefined, body);
    await post(alice, undefined, body);
    expect(await countNamed('Ohne Schlüssel')).toBe(2);
  });

  it('is in the OpenAPI document', async () => {
    const doc = (await api.request('GET', '/api/openapi.json')).json;
    const operation = doc.paths['/api/features'].post;
    expect(operation.parameters.map((p: { name: string; in: string }) => `${p.in}:${p.name}`)).toContain('header:Idempotency-Key');
    expect(operation.responses).toHaveProperty('422');
  });
});
