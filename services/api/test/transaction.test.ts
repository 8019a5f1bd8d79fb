import type pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { AppError } from '../../shared/errors.js';
import { withTransaction } from '../src/db/pool.js';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';

/**
 * The API's transaction (db/pool.ts) over the one shared implementation (services/shared/db/transaction.ts),
 * on a real database (PostgreSQL at TEST_DATABASE_URL, else the embedded PGlite): all or nothing, the
 * actor for the history trigger, the API's errors, and a connection whose ROLLBACK failed never handed
 * to the next caller.
 */
let db: TestDatabase;
let pool: pg.Pool;

beforeAll(async () => {
  db = await createTestDatabase({ migrate: false });
  pool = db.pool;
  await pool.query('CREATE SCHEMA scratch; CREATE TABLE scratch.t (n integer PRIMARY KEY)');
});
afterAll(async () => {
  await db.close();
});
beforeEach(async () => {
  await pool.query('TRUNCATE scratch.t');
});

const rows = async () => (await pool.query<{ n: number }>('SELECT n FROM scratch.t ORDER BY n')).rows.map((row) => row.n);

describe('withTransaction', () => {
  it('commits the work as one and answers what it returned', async () => {
    const answer = await withTransaction(pool, async (client) => {
      await client.query('INSERT INTO scratch.t VALUES (1), (2)');
      await client.query('INSERT INTO scratch.t VALUES (3)');
      return 'done';
    });
    expect(answer).toBe('done');
    expect(await rows()).toEqual([1, 2, 3]);
  });

  it('keeps nothing of work that failed, and the database failure leaves as the API error', async () => {
    await pool.query('INSERT INTO scratch.t VALUES (7)');
    const failed = withTransaction(pool, async (client) => {
      await client.query('INSERT INTO scratch.t VALUES (8)');
      await client.query('INSERT INTO scratch.t VALUES (7)'); // unique violation
    });
    await expect(failed).rejects.toBeInstanceOf(AppError);
    await expect(failed).rejects.toMatchObject({ code: 'CONFLICT' });
    expect(await rows()).toEqual([7]);
  });

  it('passes an error of the work itself on unchanged, after rolling back', async () => {
    const mine = new Error('not a database error');
    await expect(
      withTransaction(pool, async (client) => {
        await client.query('INSERT INTO scratch.t VALUES (9)');
        throw mine;
      }),
    ).rejects.toBe(mine);
    expect(await rows()).toEqual([]);
  });

  it('sets the actor for this transaction only', async () => {
    const inside = await withTransaction(pool, async (client) => (await client.query<{ actor: string }>("SELECT current_setting('app.actor', true) AS actor")).rows[0]!.actor, { actor: 'user-42' });
    expect(inside).toBe('user-42');
    // The same pooled connections afterwards: the setting ended with the transaction.
    const after = await Promise.all([1, 2, 3, 4].map(() => pool.query<{ actor: string | null }>("SELECT nullif(current_setting('app.actor', true), '') AS actor")));
    expect(after.map((result) => result.rows[0]!.actor)).toEqual([null, null, null, null]);
  });

  it('discards a connection whose ROLLBACK failed instead of handing it to the next caller', async () => {
    // Make every connection of the pool exist and idle, so a discarded one shows in the pool's count.
    await Promise.all([1, 2, 3, 4].map(() => pool.query('SELECT pg_sleep(0.01)')));
    expect([pool.totalCount, pool.idleCount]).toEqual([4, 4]);
    let used: pg.PoolClient | undefined;
    await expect(
      withTransaction(pool, async (client) => {
        used = client;
        await client.query('INSERT INTO scratch.t VALUES (5)');
        // The one failure injected: this client's ROLLBACK is refused; its connection stays alive.
        const query = client.query.bind(client) as (text: string) => Promise<unknown>;
        (client as unknown as { query: (text: string) => Promise<unknown> }).query = (text: string) => (text === 'ROLLBACK' ? Promise.reject(new Error('rollback refused')) : query(text));
        throw new Error('work failed');
      }),
    ).rejects.toThrow('work failed');
    expect(pool.totalCount).toBe(3);
    const next = await pool.connect();
    try {
      expect(next).not.toBe(used);
      expect((await next.query<{ open: boolean }>('SELECT now() = statement_timestamp() AS open')).rows[0]!.open).toBe(true);
    } finally {
      next.release();
    }
    expect(await rows()).toEqual([]);
  });
});
