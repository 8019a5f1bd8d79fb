import { beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';

/**
 * Review claims over HTTP: taking, renewing, releasing and expiring a claim; what others see in the
 * queue; decisions refused to everyone but the holder; 50 concurrent claims with exactly one winner.
 */
const { db, api } = useTestApi({ queue: true });
const token: Record<string, string | undefined> = {};

beforeAll(async () => {
  token.guest = await api.tokenFor('guest', 'gina');
  token.contributor = await api.tokenFor('contributor', 'conny');
  token.rita = await api.tokenFor('reviewer', 'rita');
  token.rolf = await api.tokenFor('reviewer', 'rolf');
  token.admin = await api.tokenFor('admin', 'adam');
});

async function submittedFeature(by = 'contributor'): Promise<string> {
  const created = await api.request('POST', '/api/features', { token: token[by], body: aFeature() });
  expect(created.status).toBe(201);
  const id = created.json.id as string;
  expect((await api.request('POST', '/api/qc/submit', { token: token[by], body: { featureId: id, comment: 'bitte prüfen' } })).status).toBe(200);
  return id;
}
const claim = (who: string | undefined, id: string) => api.request('POST', `/api/qc/claim/${encodeURIComponent(id)}`, { token: who === undefined ? undefined : token[who] });
const release = (who: string, id: string) => api.request('DELETE', `/api/qc/claim/${encodeURIComponent(id)}`, { token: token[who] });
const queueItem = async (who: string, id: string) => {
  const queue = await api.request('GET', '/api/qc/queue', { token: token[who] });
  expect(queue.status).toBe(200);
  return (queue.json.items as { featureId: string; claim: Record<string, unknown> | null }[]).find((item) => item.featureId === id);
};

describe('claiming a QC item', () => {
  it('a reviewer claims an item for ten minutes and the other reviewers see who holds it in the queue', async () => {
    const id = await submittedFeature();
    expect((await queueItem('rolf', id))?.claim).toBeNull();

    const taken = await claim('rita', id);
    expect(taken.status).toBe(200);
    expect(taken.json).toMatchObject({ featureId: id, holder: 'rita' });
    const minutes = (Date.parse(taken.json.expiresAt) - Date.parse(taken.json.claimedAt)) / 60_000;
    expect(minutes).toBeCloseTo(10, 1);

    expect((await queueItem('rolf', id))?.claim).toMatchObject({ holder: 'rita', expiresAt: taken.json.expiresAt });
    const refused = await claim('rolf', id);
    expect(refused.status).toBe(409);
    expect(refused.headers.get('content-type')).toContain('application/problem+json');
    expect(refused.json).toMatchObject({ code: 'CLAIMED' });
    expect(refused.json.detail).toContain('rita');
  });

  it('the holder renews the claim with another POST, keeping when the review started', async () => {
    const id = await submittedFeature();
    const first = await claim('rita', id);
    await db.pool.query(`UPDATE qc.claims SET expires_at = now() + interval '1 minute' WHERE feature_id = $1`, [id]);
    const renewed = await claim('rita', id);
    expect(renewed.status).toBe(200);
    expect(renewed.json.claimedAt).toBe(first.json.claimedAt);
    expect(Date.parse(renewed.json.expiresAt) - Date.now()).toBeGreaterThan(9 * 60_000);
  });

  it('an expired claim is taken over by the next reviewer and no longer shown', async () => {
    const id = await submittedFeature();
    expect((await claim('rita', id)).status).toBe(200);
    await db.pool.query(`UPDATE qc.claims SET expires_at = now() - interval '1 second' WHERE feature_id = $1`, [id]);
    expect((await queueItem('rolf', id))?.claim).toBeNull();
    const taken = await claim('rolf', id);
    expect(taken.status).toBe(200);
    expect(taken.json.holder).toBe('rolf');
    // And the previous holder may no longer decide.
    const decided = await api.request('POST', `/api/qc/approve/${id}`, { token: token.rita });
    expect(decided.status).toBe(409);
    expect(decided.json.detail).toContain('rolf');
  });

  it('a release ends the claim; releasing another reviewer\'s claim is refused, an admin may', async () => {
    const id = await submittedFeature();
    expect((await claim('rita', id)).status).toBe(200);
    const foreign = await release('rolf', id);
    expect(foreign.status).toBe(409);
    expect(foreign.json.detail).toContain('rita');
    expect((await release('rita', id)).status).toBe(204);
    expect((await queueItem('rolf', id))?.claim).toBeNull();
    expect((await release('rita', id)).status).toBe(204); // nothing left to release

    expect((await claim('rolf', id)).status).toBe(200);
    expect((await release('admin', id)).status).toBe(204);
    expect((await queueItem('rita', id))?.claim).toBeNull();
  });

  it('a page closing after the same reviewer renewed the claim on another page releases nothing: the renewed claim stays and others are still refused', async () => {
    const id = await submittedFeature();
    const first = await claim('rita', id); // the desk in her first tab
    expect(first.status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 5));
    const renewed = await claim('rita', id); // she opens the item again in a second tab
    expect(renewed.status).toBe(200);
    expect(renewed.json.expiresAt).not.toBe(first.json.expiresAt);
    // The first tab closes: its release names the claim it held, which is no longer the live one.
    const stale = await api.request('DELETE', `/api/qc/claim/${encodeURIComponent(id)}?expiresAt=${encodeURIComponent(first.json.expiresAt)}`, { token: token.rita });
    expect(stale.status).toBe(204);
    expect((await queueItem('rolf', id))?.claim).toMatchObject({ holder: 'rita', expiresAt: renewed.json.expiresAt });
    expect((await claim('rolf', id)).status).toBe(409);
    // The second tab's release, naming the live claim, ends it.
    const current = await api.request('DELETE', `/api/qc/claim/${encodeURIComponent(id)}?expiresAt=${encodeURIComponent(renewed.json.expiresAt)}`, { token: token.rita });
    expect(current.status).toBe(204);
    expect((await claim('rolf', id)).status).toBe(200);
    // Another reviewer's stale release is refused as before, and a malformed expiresAt is a 400.
    expect((await api.request('DELETE', `/api/qc/claim/${encodeURIComponent(id)}?expiresAt=${encodeURIComponent(first.json.expiresAt)}`, { token: token.rita })).status).toBe(409);
    for (const bad of ['yesterday', '2026-11-28', `${'9'.repeat(41)}`, '2026-11-28T08:00:00.1234567+00:00']) {
      const refused = await api.request('DELETE', `/api/qc/claim/${encodeURIComponent(id)}?expiresAt=${encodeURIComponent(bad)}`, { token: token.rolf });
      expect(refused.status, bad).toBe(400);
    }
    expect((await queueItem('rita', id))?.claim).toMatchObject({ holder: 'rolf' });
  });

  it('only reviewers and admins claim, only items in review, and never their own submission', async () => {
    const id = await submittedFeature();
    expect((await claim(undefined, id)).status).toBe(401);
    expect((await claim('guest', id)).status).toBe(403);
    expect((await claim('contributor', id)).status).toBe(403);
    expect((await claim('rita', 'no-such-feature')).status).toBe(404);

    const own = await submittedFeature('rita');
    const refused = await claim('rita', own);
    expect(refused.status).toBe(403);
    expect(refused.json.detail).toMatch(/four-eyes/);

    const draft = await api.request('POST', '/api/features', { token: token.contributor, body: aFeature() });
    const notInQc = await claim('rita', draft.json.id);
    expect(notInQc.status).toBe(409);
    expect(notInQc.json.code).toBe('INVALID_STATE');
  });
});

describe('claims and decisions', () => {
  it('a decision by someone other than the holder of a live claim is refused with 409 naming the holder', async () => {
    const id = await submittedFeature();
    expect((await claim('rita', id)).status).toBe(200);
    for (const [who, path, body] of [
      ['rolf', 'approve', undefined],
      ['rolf', 'reject', { reason: 'falsche Adresse' }],
      ['admin', 'approve', undefined],
    ] as const) {
      const refused = await api.request('POST', `/api/qc/${path}/${id}`, { token: token[who], ...(body ? { body } : {}) });
      expect(refused.status, `${who} ${path}`).toBe(409);
      expect(refused.json.code).toBe('CLAIMED');
      expect(refused.json.detail).toContain('rita');
    }
    const status = await db.pool.query(`SELECT status FROM features.features WHERE id = $1`, [id]);
    expect(status.rows[0].status).toBe('in_qc');
  });

  it('the holder decides, and the decision ends the claim', async () => {
    const id = await submittedFeature();
    expect((await claim('rita', id)).status).toBe(200);
    const rejected = await api.request('POST', `/api/qc/reject/${id}`, { token: token.rita, body: { reason: 'Name fehlt' } });
    expect(rejected.status).toBe(200);
    expect((await db.pool.query(`SELECT 1 FROM qc.claims WHERE feature_id = $1`, [id])).rowCount).toBe(0);
    // Decided: nothing left to claim.
    expect((await claim('rolf', id)).json.code).toBe('INVALID_STATE');
  });

  it('an unclaimed item is decided as before: state and four-eyes are still checked', async () => {
    const own = await submittedFeature('rita');
    const fourEyes = await api.request('POST', `/api/qc/approve/${own}`, { token: token.rita });
    expect(fourEyes.status).toBe(403);
    expect((await api.request('POST', `/api/qc/approve/${own}`, { token: token.rolf })).status).toBe(200);
    expect((await api.request('POST', `/api/qc/approve/${own}`, { token: token.rolf })).status).toBe(409);
  });

  it('an edit that bypasses the API (SQL, WFS-T) returns the feature to draft and ends its claim', async () => {
    const id = await submittedFeature();
    expect((await claim('rita', id)).status).toBe(200);
    await db.pool.query(`UPDATE features.features SET name = 'Neuer Name' WHERE id = $1`, [id]);
    expect((await db.pool.query(`SELECT 1 FROM qc.claims WHERE feature_id = $1`, [id])).rowCount).toBe(0);
  });
});

describe('concurrency', () => {
  it('50 parallel claims on one item by 50 reviewers leave exactly one holder', async () => {
    const id = await submittedFeature();
    const reviewers = await Promise.all(Array.from({ length: 50 }, (_, i) => api.tokenFor('reviewer', `reviewer-${i}`)));
    const answers = await Promise.all(reviewers.map((t) => api.request('POST', `/api/qc/claim/${id}`, { token: t })));
    const winners = answers.filter((a) => a.status === 200);
    expect(winners).toHaveLength(1);
    expect(answers.filter((a) => a.status === 409)).toHaveLength(49);
    const holder = winners[0]!.json.holder as string;
    for (const loser of answers.filter((a) => a.status === 409)) expect(loser.json.detail).toContain(holder);
    const rows = await db.pool.query(`SELECT holder FROM qc.claims WHERE feature_id = $1`, [id]);
    expect(rows.rows).toEqual([{ holder }]);
  });

  it('two reviewers deciding one claimed item at once: only the holder\'s decision lands', async () => {
    const id = await submittedFeature();
    expect((await claim('rita', id)).status).toBe(200);
    const [byRolf, byRita] = await Promise.all([
      api.request('POST', `/api/qc/approve/${id}`, { token: token.rolf }),
      api.request('POST', `/api/qc/reject/${id}`, { token: token.rita, body: { reason: 'Geometrie falsch' } }),
    ]);
    expect(byRita!.status).toBe(200);
    expect(byRolf!.status).toBe(409);
    const transitions = await db.pool.query(`SELECT action, actor FROM qc.transitions WHERE feature_id = $1 AND action <> 'submit'`, [id]);
    expect(transitions.rows).toEqual([{ action: 'reject', actor: 'rita' }]);
  });
});

describe('the OpenAPI document', () => {
  it('describes claiming and releasing', async () => {
    const doc = (await api.request('GET', '/api/openapi.json')).json;
    expect(Object.keys(doc.paths['/api/qc/claim/{id}'])).toEqual(expect.arrayContaining(['post', 'delete']));
    expect(doc.paths['/api/qc/claim/{id}'].post.responses['409']).toBeDefined();
    expect(doc.components.schemas.QcQueueItem.properties.claim).toBeDefined();
  });
});
