import { beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';

const { api } = useTestApi();
let alice: string;

beforeAll(async () => {
  alice = await api.tokenFor('contributor', 'alice');
});

interface HistoryJson {
  versions: Array<{ version: number; operation: string; note: string | null }>;
}

describe('a note on an edit (X-Edit-Note) in the feature history', () => {
  it('stores the note of a PUT with the version it made, and /history returns it; other versions have none', async () => {
    const created = await api.request('POST', '/api/features', { token: alice, body: aFeature() });
    const id = created.json.id as string;
    const note = 'merged offline edit: name from mine; telefon from theirs';
    const updated = await api.request('PUT', `/api/features/${id}`, {
      token: alice,
      headers: { 'if-match': '"1"', 'x-edit-note': note },
      body: aFeature({ id, properties: { name: 'Zusammengeführt', telefon: '030 1' } }),
    });
    expect(updated.status).toBe(200);
    await api.request('PUT', `/api/features/${id}`, { token: alice, headers: { 'if-match': '"2"' }, body: aFeature({ id, properties: { name: 'Danach' } }) });
    const history = await api.request('GET', `/api/features/${id}/history`);
    expect((history.json as unknown as HistoryJson).versions.map((v) => [v.version, v.note])).toEqual([
      [3, null],
      [2, note],
      [1, null],
    ]);
  });

  it('does not let the note leak into the next transaction on the same connection', async () => {
    const created = await api.request('POST', '/api/features', { token: alice, body: aFeature() });
    const id = created.json.id as string;
    for (let version = 1; version <= 4; version++) {
      const headers: Record<string, string> = { 'if-match': `"${version}"`, ...(version === 1 ? { 'x-edit-note': 'only the first' } : {}) };
      expect((await api.request('PUT', `/api/features/${id}`, { token: alice, headers, body: aFeature({ id, properties: { name: `Name ${version}` } }) })).status).toBe(200);
    }
    const history = (await api.request('GET', `/api/features/${id}/history`)).json as unknown as HistoryJson;
    expect(history.versions.filter((v) => v.note !== null).map((v) => v.version)).toEqual([2]);
  });

  it('refuses a note of 501 characters or with a line break with 400 and changes nothing', async () => {
    const created = await api.request('POST', '/api/features', { token: alice, body: aFeature() });
    const id = created.json.id as string;
    for (const note of ['x'.repeat(501), 'line one\tline two']) {
      const refused = await api.request('PUT', `/api/features/${id}`, { token: alice, headers: { 'if-match': '"1"', 'x-edit-note': note }, body: aFeature({ id, properties: { name: 'Nie' } }) });
      expect(refused.status).toBe(400);
      expect(refused.json).toMatchObject({ code: 'VALIDATION_FAILED' });
    }
    expect((await api.request('GET', `/api/features/${id}`)).json.properties).toMatchObject({ version: 1 });
  });
});
