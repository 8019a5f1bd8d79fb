import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbeddedDatabase } from '../src/db/embedded.js';
import { servePGlite, type PGliteServer } from '../src/db/pglite-server.js';

/**
 * The wire server in front of PGlite must make one single-session database safe for a pool of
 * connections: no interleaving of extended-protocol batches or transactions, no stall when a client
 * fails or vanishes.
 */
let db: PGlite;
let server: PGliteServer;
let pool: pg.Pool;
const url = () => `postgres://postgres@${server.host}:${server.port}/postgres`;

beforeAll(async () => {
  db = await PGlite.create();
  server = await servePGlite(db);
  pool = new pg.Pool({ connectionString: url(), max: 8 });
  await pool.query('CREATE TABLE t (id int PRIMARY KEY, note text)');
});
afterAll(async () => {
  await pool?.end();
  await server?.close();
  await db?.close();
});

describe('a pg pool over the PGlite wire server', () => {
  it('answers hundreds of concurrent parameterised queries each with its own result', async () => {
    const results = await Promise.all(
      Array.from({ length: 400 }, (_, i) => pool.query<{ n: number; s: string }>('SELECT $1::int + 1 AS n, $2::text AS s', [i, `s${i}`])),
    );
    results.forEach((r, i) => expect(r.rows[0]).toEqual({ n: i + 1, s: `s${i}` }));
  });

  it('reassembles messages that arrive in many pieces (a 4 MB parameter)', async () => {
    const big = 'ä'.repeat(2_000_000);
    const { rows } = await pool.query<{ n: number; same: boolean }>('SELECT char_length($1::text) AS n, $1::text = $2::text AS same', [big, big]);
    expect(rows[0]).toEqual({ n: 2_000_000, same: true });
    expect((await pool.query('SELECT 1 AS still_serving')).rows).toEqual([{ still_serving: 1 }]);
  });

  it('keeps a transaction to its connection: others wait, then see only committed work', async () => {
    const writer = await pool.connect();
    try {
      await writer.query('BEGIN');
      await writer.query('INSERT INTO t VALUES ($1, $2)', [1, 'uncommitted']);
      let readerDone = false;
      const reader = pool.query<{ n: number }>('SELECT count(*)::int AS n FROM t WHERE id = $1', [1]).then((r) => {
        readerDone = true;
        return r.rows[0]!.n;
      });
      await new Promise((r) => setTimeout(r, 100));
      expect(readerDone).toBe(false); // it would otherwise have run inside the writer's transaction
      await writer.query('ROLLBACK');
      expect(await reader).toBe(0);
    } finally {
      writer.release();
    }
  });

  it('rolls back the transaction of a client that vanishes, and carries on', async () => {
    const client = new pg.Client({ connectionString: url() });
    client.on('error', () => undefined);
    await client.connect();
    await client.query('BEGIN');
    await client.query('INSERT INTO t VALUES ($1, $2)', [2, 'lost']);
    (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
    const { rows } = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM t WHERE id = $1', [2]);
    expect(rows[0]!.n).toBe(0);
  });

  it('reports errors to the failing query only', async () => {
    const [failed, fine] = await Promise.allSettled([pool.query('SELECT 1 / $1::int', [0]), pool.query('SELECT $1::text AS ok', ['yes'])]);
    expect(failed.status).toBe('rejected');
    expect((failed as PromiseRejectedResult).reason).toMatchObject({ code: '22012' });
    expect(fine.status === 'fulfilled' && fine.value.rows[0]).toEqual({ ok: 'yes' });
    const inTransaction = await pool.connect();
    try {
      await inTransaction.query('BEGIN');
      await expect(inTransaction.query('SELECT no_such_column FROM t')).rejects.toThrow();
      await inTransaction.query('ROLLBACK');
    } finally {
      inTransaction.release();
    }
    expect((await pool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
  });
});

describe('the embedded database folder', () => {
  it('refuses a second process-level open of the same folder and allows it after close', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pglite-lock-'));
    const dataDir = join(dir, 'pglite');
    try {
      const first = await startEmbeddedDatabase({ dataDir });
      // The pid file names this process, which is alive: a second opener from another process is refused.
      writeFileSync(join(dir, 'pglite.pid'), String(process.ppid));
      await expect(startEmbeddedDatabase({ dataDir })).rejects.toThrow(/in use by process/);
      writeFileSync(join(dir, 'pglite.pid'), String(process.pid));
      await first.close();
      const second = await startEmbeddedDatabase({ dataDir });
      await second.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
