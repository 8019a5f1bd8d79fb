/**
 * The change limit across API processes (docs/api.md "Rate limit", issue 30): three apps on one
 * database, as three replicas behind the proxy, count one user's changes against one budget. The
 * writes go round-robin and concurrently; exactly the limit is accepted, whichever replica answers.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { aFeature, startTestApi, type TestApi } from '../../../test/helpers/api.js';

const LIMIT = 5;
let db: TestDatabase;
const replicas: TestApi[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  for (let i = 0; i < 3; i++) replicas.push(await startTestApi(db, { config: { rateLimit: { writesPerMinute: LIMIT } } }));
});

afterAll(async () => {
  for (const api of replicas) await api.close();
  await db?.close();
});

describe('the change limit with three API processes on one database', () => {
  it("accepts exactly the limit of one user's writes spread over the replicas, the rest 429", async () => {
    // Each replica's issuer signs its own tokens; the subject is what the budget is keyed on.
    const statuses = await Promise.all(
      Array.from({ length: 12 }, async (_, i) => {
        const api = replicas[i % replicas.length]!;
        const token = await api.tokenFor('contributor', 'replica-writer');
        return (await api.request('POST', '/api/features', { token, body: aFeature() })).status;
      }),
    );
    expect(statuses.filter((s) => s === 201)).toHaveLength(LIMIT);
    expect(statuses.filter((s) => s === 429)).toHaveLength(12 - LIMIT);
  });

  it('keeps one row per caller and window in http.rate_limits', async () => {
    const { rows } = await db.pool.query(`SELECT key, hits FROM http.rate_limits WHERE key = 'user:replica-writer'`);
    expect(rows).toEqual([{ key: 'user:replica-writer', hits: 12 }]);
  });
});
