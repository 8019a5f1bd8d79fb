import { beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';

const { api } = useTestApi({ queue: true });
let alice: string;
let rita: string;

beforeAll(async () => {
  alice = await api.tokenFor('contributor', 'alice');
  rita = await api.tokenFor('reviewer', 'rita');
});

async function submitted(name: string): Promise<string> {
  const created = await api.request('POST', '/api/features', { token: alice, body: aFeature({ properties: { name } }) });
  const id = created.json.id as string;
  expect((await api.request('POST', '/api/qc/submit', { token: alice, body: { featureId: id } })).status).toBe(200);
  return id;
}

describe('the review queue count (GET /api/qc/queue/count)', () => {
  it('counts the features waiting for a decision, up with a submission and down with a decision', async () => {
    const count = async () => (await api.request('GET', '/api/qc/queue/count', { token: rita })).json.count;
    expect(await count()).toBe(0);
    const first = await submitted('Erstes');
    await submitted('Zweites');
    expect(await count()).toBe(2);
    expect((await api.request('POST', `/api/qc/approve/${first}`, { token: rita })).status).toBe(200);
    expect(await count()).toBe(1);
  });

  it('answers 304 without a body while the count is unchanged, and 200 once it changed', async () => {
    const first = await api.request('GET', '/api/qc/queue/count', { token: rita });
    const etag = first.headers.get('etag')!;
    expect(etag).toMatch(/^W\/"\d+"$/);
    const unchanged = await api.request('GET', '/api/qc/queue/count', { token: rita, headers: { 'if-none-match': etag } });
    expect(unchanged.status).toBe(304);
    expect(unchanged.text).toBe('');
    await submitted('Drittes');
    const changed = await api.request('GET', '/api/qc/queue/count', { token: rita, headers: { 'if-none-match': etag } });
    expect(changed.status).toBe(200);
    expect(changed.json.count).toBe(first.json.count + 1);
  });

  it('is for reviewers only: a contributor gets 403, an anonymous caller 401', async () => {
    expect((await api.request('GET', '/api/qc/queue/count', { token: alice })).status).toBe(403);
    expect((await api.request('GET', '/api/qc/queue/count')).status).toBe(401);
  });
});
