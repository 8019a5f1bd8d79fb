import type pg from 'pg';

/**
 * Run `work` in one transaction on one connection of `pool`: everything commits together or nothing
 * does. A connection whose ROLLBACK failed is discarded rather than handed to the next caller. The one
 * transaction of the code base: the API (db/pool.ts adds its actor and its errors), the webhook's
 * journal, the migrations and the login app's table all run theirs through it.
 */
export async function withTransaction<T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query('BEGIN');
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch((rollbackError: unknown) => (broken = rollbackError as Error));
    throw error;
  } finally {
    client.release(broken);
  }
}
