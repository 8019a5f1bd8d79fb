import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
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

describe('named prepared statements on the one shared backend', () => {
  it('keeps each client to its own statements under the same name, and drops them when it leaves', async () => {
    const prepared = async () => (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_prepared_statements')).rows[0]!.n;
    const before = await prepared();
    const [a, b] = [new pg.Client({ connectionString: url() }), new pg.Client({ connectionString: url() })];
    await Promise.all([a.connect(), b.connect()]);
    try {
      const asNumber = (n: number) => a.query<{ n: number }>({ name: 'same-name', text: 'SELECT $1::int + 1 AS n', values: [n] });
      const asText = (s: string) => b.query<{ s: string }>({ name: 'same-name', text: 'SELECT $1::text AS s', values: [s] });
      const [first, second] = await Promise.all([asNumber(1), asText('b')]);
      expect(first.rows).toEqual([{ n: 2 }]);
      expect(second.rows).toEqual([{ s: 'b' }]);
      // Second round: pg only binds the name now, so each must still find its own statement.
      const [third, fourth] = await Promise.all([asNumber(10), asText('again')]);
      expect(third.rows).toEqual([{ n: 11 }]);
      expect(fourth.rows).toEqual([{ s: 'again' }]);
      expect(await prepared()).toBe(before + 2);
    } finally {
      await Promise.all([a.end(), b.end()]);
    }
    await vi.waitFor(async () => expect(await prepared()).toBe(before), { timeout: 5_000 });
  });
});

describe('LISTEN/NOTIFY on the one shared backend', () => {
  it('delivers a notification to the connections listening on its channel, and only to them', async () => {
    const [listener, secondListener, bystander, notifier] = [0, 1, 2, 3].map(() => new pg.Client({ connectionString: url() }));
    const clients = [listener!, secondListener!, bystander!, notifier!];
    await Promise.all(clients.map((c) => c.connect()));
    const heard = new Map<pg.Client, string[]>(clients.map((c) => [c, []]));
    for (const c of clients) c.on('notification', (n) => heard.get(c)!.push(`${n.channel}=${n.payload ?? ''}`));
    try {
      await listener!.query('LISTEN "jobs:insert"');
      await secondListener!.query('listen "jobs:insert"; LISTEN other');
      await bystander!.query('LISTEN unrelated');
      await notifier!.query('SELECT pg_notify($1, $2)', ['jobs:insert', 'one']);
      await notifier!.query('BEGIN');
      await notifier!.query(`NOTIFY "jobs:insert", 'two'`);
      await notifier!.query('COMMIT');
      // One listener leaving the channel (UNLISTEN on the shared backend) must not deafen the other.
      await secondListener!.query('UNLISTEN "jobs:insert"');
      await notifier!.query('SELECT pg_notify($1, $2)', ['jobs:insert', 'three']);
      await notifier!.query('SELECT pg_notify($1, $2)', ['other', 'four']);
      await vi.waitFor(() => expect(heard.get(listener!)).toEqual(['jobs:insert=one', 'jobs:insert=two', 'jobs:insert=three']), { timeout: 5_000 });
      await vi.waitFor(() => expect(heard.get(secondListener!)).toEqual(['jobs:insert=one', 'jobs:insert=two', 'other=four']), { timeout: 5_000 });
      expect(heard.get(bystander!)).toEqual([]);
      expect(heard.get(notifier!)).toEqual([]);
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
  });
});

describe('the wire protocol each client sees after an error (PGlite sends one ReadyForQuery too many)', () => {
  it('answers a failed extended-protocol query once, so the next pipelined query gets its own result', async () => {
    // pg in pipeline mode sends both queries at once and matches answers to queries by ReadyForQuery:
    // a stray one after the error would end the second query early, with no rows.
    const client = new pg.Client({ connectionString: url(), pipeline: true } as pg.ClientConfig);
    await client.connect();
    try {
      const failing = client.query('SELECT 1 / $1::int', [0]);
      const next = client.query<{ s: string }>('SELECT $1::text AS s', ['after the error']);
      await expect(failing).rejects.toMatchObject({ code: '22012' });
      expect((await next).rows).toEqual([{ s: 'after the error' }]);
      expect((await client.query<{ n: number }>('SELECT $1::int AS n', [7])).rows).toEqual([{ n: 7 }]);
    } finally {
      await client.end();
    }
  });

  it('after an error skips until Sync like PostgreSQL: no ReadyForQuery before it, one for it, and the session stays with the client', async () => {
    const raw = await rawConnection();
    try {
      expect((await raw.exchange(startupMessage())).at(-1)).toBe('Z(I)');
      // Parse/Bind/Execute + Flush, as a client reading rows in pages sends: the error, nothing else.
      expect(await raw.exchange(...extendedQuery('SELECT 1 / 0'), message('H'))).toEqual(['1', 'E']);
      // Until its Sync the backend ignores everything of this client and belongs to no one else.
      let otherDone = false;
      const other = pool.query<{ n: number }>('SELECT $1::int AS n', [3]).then((r) => {
        otherDone = true;
        return r.rows;
      });
      expect(await raw.exchange(message('Q', cString('SELECT 1')))).toEqual([]);
      expect(otherDone).toBe(false);
      expect(await raw.exchange(message('S'))).toEqual(['Z(I)']);
      expect(await other).toEqual([{ n: 3 }]);
      expect(await raw.exchange(...extendedQuery('SELECT 2'), message('S'))).toEqual(['1', '2', 'T', 'D', 'C', 'Z(I)']);
      // In a transaction: one ReadyForQuery, with the failed-transaction status.
      expect(await raw.exchange(message('Q', cString('BEGIN')))).toEqual(['C', 'Z(T)']);
      expect(await raw.exchange(...extendedQuery('SELECT 1 / 0'), message('S'))).toEqual(['1', 'E', 'Z(E)']);
      expect(await raw.exchange(message('Q', cString('ROLLBACK')))).toEqual(['C', 'Z(I)']);
    } finally {
      raw.close();
    }
  });

  it('lets two clients race for the same key in transactions, as concurrent graphile-worker migrations do', async () => {
    await pool.query('CREATE TABLE race (id int PRIMARY KEY)');
    const migrator = async (): Promise<number> => {
      const client = await pool.connect();
      let clashes = 0;
      try {
        for (let id = 1; id <= 20; id++) {
          await client.query('begin');
          try {
            await client.query({ text: 'insert into race (id) values ($1)', values: [id] });
            await client.query('select pg_notify($1, $2)', ['race', String(id)]);
            await client.query('commit');
          } catch (error) {
            await client.query('rollback');
            if ((error as { code?: string }).code !== '23505') throw error;
            clashes++;
          }
          // Every answer still belongs to its own query, and the key is there exactly once.
          const { rows } = await client.query<{ id: number; n: number }>('SELECT $1::int AS id, count(*)::int AS n FROM race WHERE id = $1', [id]);
          expect(rows).toEqual([{ id, n: 1 }]);
        }
        return clashes;
      } finally {
        client.release();
      }
    };
    const [a, b] = await Promise.all([migrator(), migrator()]);
    expect(a + b).toBe(20);
    expect((await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM race')).rows).toEqual([{ n: 20 }]);
  });
});

/** One frontend message: type byte, length, body. */
function message(type: string, ...body: Buffer[]): Buffer {
  const content = Buffer.concat(body);
  const header = Buffer.alloc(5);
  header.write(type, 0, 'latin1');
  header.writeInt32BE(4 + content.length, 1);
  return Buffer.concat([header, content]);
}
const cString = (text: string) => Buffer.from(`${text}\0`);
const int16 = (n: number) => Buffer.from([n >> 8, n & 0xff]);

function startupMessage(): Buffer {
  const body = Buffer.concat([Buffer.from([0, 3, 0, 0]), cString('user'), cString('postgres'), cString('database'), cString('postgres'), Buffer.from([0])]);
  const length = Buffer.alloc(4);
  length.writeInt32BE(4 + body.length);
  return Buffer.concat([length, body]);
}

/** Parse, Bind (no parameters), Describe portal, Execute — unnamed statement and portal. */
function extendedQuery(sql: string): Buffer[] {
  return [
    message('P', cString(''), cString(sql), int16(0)),
    message('B', cString(''), cString(''), int16(0), int16(0), int16(0)),
    message('D', Buffer.from('P'), cString('')),
    message('E', cString(''), Buffer.alloc(4)),
  ];
}

/** A bare protocol connection: send messages, get back the types of the replies ("Z(I)" with status). */
async function rawConnection() {
  const socket = connect(server.port, server.host);
  await once(socket, 'connect');
  let received = Buffer.alloc(0);
  socket.on('data', (chunk: Buffer) => {
    received = Buffer.concat([received, chunk]);
  });
  const replyTypes = (): string[] => {
    const types: string[] = [];
    let offset = 0;
    while (received.length - offset >= 5) {
      const size = 1 + received.readInt32BE(offset + 1);
      if (received.length - offset < size) break;
      const type = String.fromCharCode(received[offset]!);
      // Parameter status, backend key data and notices are not part of what these tests pin down.
      if (type === 'Z') types.push(`Z(${String.fromCharCode(received[offset + 5]!)})`);
      else if (!['S', 'K', 'N', 'R', 'A'].includes(type)) types.push(type);
      offset += size;
    }
    received = received.subarray(offset);
    return types;
  };
  return {
    /** Sends, then collects replies once the server has been quiet for a while (at least 1 s if it says nothing). */
    async exchange(...messages: Buffer[]): Promise<string[]> {
      const sent = Date.now();
      socket.write(Buffer.concat(messages));
      let seen = received.length;
      let quietSince = Date.now();
      for (;;) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        if (received.length !== seen) {
          seen = received.length;
          quietSince = Date.now();
        } else if (Date.now() - quietSince >= 150 && (received.length > 0 || Date.now() - sent >= 1_000)) {
          return replyTypes();
        }
      }
    },
    close: () => socket.destroy(),
  };
}

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
