import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VectorTile } from '@mapbox/vector-tile';
import pg from 'pg';
import { PbfReader } from 'pbf';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { aFeature, startTestApi, type TestApi } from '../../../test/helpers/api.js';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { closeGracefully, listen } from '../../shared/http-server.js';
import { TILE_DETAIL_MIN_ZOOM } from '../../shared/tiles.js';
import { createApp } from '../src/app.js';
import { createAuthenticator } from '../src/auth/index.js';
import type { Authenticator } from '../../shared/principal.js';
import { serveApp } from '../src/http/server.js';
import { startTileChangeFeed, type TileChangeFeed } from '../src/tiles/changes.js';
import { OVERVIEW_BUDGET_BYTES, TILE_PIXELS } from '../src/tiles/queries.js';
import type { Box } from '../src/tiles/bounds.js';
import { tileOf } from '../../../test/helpers/tiles.js';

/**
 * Tiles stay current across API processes without asking the database on a hit: every change to
 * features.features notifies every process (migration 023, tiles/changes.ts), each drops the cached
 * tiles the change meets, and while a process cannot hear changes it asks the database about each
 * tile. Two apps on one database stand for two processes: `writer` (the suite's test API) edits,
 * `reader` (an app with its own pool, counted, and its own listener) serves the tiles. Nothing here
 * sleeps and hopes: a test waits for the reader to hear the change (its listener's events), or asserts
 * the answer the reader gives while it cannot hear. On PostgreSQL and on the embedded PGlite (whose
 * TCP server delivers notifications to the connections that listen, db/pglite-server.ts).
 *
 * Also the overview's size budget on dense fixtures (tiles/queries.ts).
 */
let db: TestDatabase;
let writer: TestApi;
let contributor: string;
let authenticator: Authenticator;
let dataDir: string;
const closing: Array<() => Promise<void>> = [];

beforeAll(async () => {
  db = await createTestDatabase();
  writer = await startTestApi(db);
  contributor = await writer.tokenFor('contributor', 'conny');
  dataDir = mkdtempSync(join(tmpdir(), 'tiles-freshness-'));
  authenticator = await createAuthenticator({ production: false, dataDir });
});
afterAll(async () => {
  for (const close of closing.splice(0).reverse()) await close();
  await writer?.close();
  await db?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

type FeedEvent = { kind: 'changed'; boxes: readonly Box[]; seq: number | undefined } | { kind: 'lost' } | { kind: 'regained'; caughtUp: boolean };

interface Reader {
  url: string;
  feed: TileChangeFeed;
  /** Statements the reader's pool has run so far. */
  queries(): number;
  /** The next event of the listener of this kind (ask before causing it). */
  next<K extends FeedEvent['kind']>(kind: K): Promise<Extract<FeedEvent, { kind: K }>>;
  /** Resolves once the listener is covered. */
  covered(): Promise<void>;
  /** Resolves once the listener has heard the change of features.tile_changes.seq `seq` (or a later one). */
  heard(seq: number): Promise<void>;
}

/** An API process that serves tiles: its own pool (every query counted) and its own change listener. */
async function startReader(options: { connectionString?: string; heartbeatMs?: number; covered?: boolean } = {}): Promise<Reader> {
  const pool = new pg.Pool({ connectionString: db.url, max: 4 });
  pool.on('error', () => undefined);
  let count = 0;
  const query = pool.query.bind(pool) as (...args: unknown[]) => unknown;
  pool.query = ((...args: unknown[]) => {
    count++;
    return query(...args);
  }) as typeof pool.query;
  const feed = startTileChangeFeed({ connectionString: options.connectionString ?? db.url, db: pool, pruneEveryMs: 0, heartbeatMs: options.heartbeatMs ?? 2_000, retry: { min: 20, max: 200 } });
  const waiting: Array<{ kind: FeedEvent['kind']; resolve: (event: FeedEvent) => void }> = [];
  /** The highest seq heard, starting at what was committed before the listener was first covered. */
  let highest = 0;
  const emit = (event: FeedEvent) => {
    if (event.kind === 'changed' && event.seq !== undefined) highest = Math.max(highest, event.seq);
    for (const waiter of waiting.filter((w) => w.kind === event.kind)) {
      waiting.splice(waiting.indexOf(waiter), 1);
      waiter.resolve(event);
    }
  };
  feed.subscribe({
    changed: (boxes, seq) => emit({ kind: 'changed', boxes, seq }),
    lost: () => emit({ kind: 'lost' }),
    regained: (caughtUp) => emit({ kind: 'regained', caughtUp }),
  });
  const server = await serveApp(createApp({ db: pool, config: { rateLimit: { writesPerMinute: 0 } }, authenticator, logger: pino({ level: 'silent' }, pino.destination({ sync: true })), tileChanges: feed }));
  const port = await listen(server, 0, '127.0.0.1');
  closing.push(async () => {
    await closeGracefully(server, 1_000);
    await feed.close();
    await pool.end();
  });
  const next = <K extends FeedEvent['kind']>(kind: K) => new Promise<Extract<FeedEvent, { kind: K }>>((resolve) => waiting.push({ kind, resolve: resolve as (event: FeedEvent) => void }));
  const covered = async () => {
    if (!feed.covered) await next('regained');
  };
  if (options.covered !== false) await covered();
  highest = Math.max(highest, await latestSeq());
  return {
    url: `http://127.0.0.1:${port}`,
    feed,
    queries: () => count,
    next,
    covered,
    async heard(seq) {
      while (highest < seq) await next('changed');
    },
  };
}

/** The seq of the latest change committed (0 when none is kept). */
async function latestSeq(): Promise<number> {
  return (await db.pool.query<{ seq: number }>('SELECT coalesce(max(seq), 0)::int AS seq FROM features.tile_changes')).rows[0]!.seq;
}

const path = (t: { z: number; x: number; y: number }) => `/api/tiles/${t.z}/${t.x}/${t.y}.mvt`;

/** GET a tile from a reader: status, bytes, whether the cache answered, and how many queries it cost the reader. */
async function tile(reader: Reader, p: string) {
  const before = reader.queries();
  const response = await fetch(`${reader.url}${p}`, { headers: { 'accept-encoding': 'identity' } });
  const bytes = Buffer.from(await response.arrayBuffer());
  const timing = response.headers.get('server-timing') ?? '';
  return { status: response.status, bytes, etag: response.headers.get('etag'), cache: /cache;desc=(\w+)/.exec(timing)?.[1], queries: reader.queries() - before };
}

/** A tile's features: the MVT feature id, properties and geometry (tile units). */
function features(bytes: Buffer) {
  const layer = new VectorTile(new PbfReader(bytes)).layers.features;
  if (!layer) return [];
  return Array.from({ length: layer.length }, (_, i) => {
    const f = layer.feature(i);
    return { number: f.id, type: f.type, properties: f.properties, geometry: f.loadGeometry() };
  });
}
const names = (bytes: Buffer) => features(bytes).map((f) => f.properties.name);

/** Fetches (once the reader has heard every change so far) until it serves the tile from memory; returns that answer. */
async function cachedWithoutQuery(reader: Reader, p: string) {
  await reader.covered();
  await reader.heard(await latestSeq());
  await tile(reader, p);
  const hit = await tile(reader, p);
  expect(hit.status).toBe(200);
  expect(hit.cache).toBe('hit');
  expect(hit.queries).toBe(0);
  return hit;
}

async function create(lon: number, lat: number, name: string): Promise<string> {
  const created = await writer.request('POST', '/api/features', { token: contributor, body: aFeature({ geometry: { type: 'Point', coordinates: [lon, lat] }, properties: { name } }) });
  expect(created.status).toBe(201);
  return created.json.id as string;
}

/** The backend pids of the readers' listening connections (PostgreSQL). */
async function listenerPids(): Promise<number[]> {
  const { rows } = await db.pool.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE application_name = 'feature-api-tile-changes' AND datname = current_database()`);
  return rows.map((r) => r.pid);
}

/**
 * A TCP relay in front of the database that the test controls: `cut` ends every connection through it,
 * `refuse` turns new ones away until `accept`, `stall` stops passing bytes without closing anything
 * (a peer gone silent). With `dropNotifications`, the database's NotificationResponse messages never
 * reach the client, as behind a pooler in transaction mode; `connected(n)` resolves once n connections came.
 */
async function startRelay(options: { dropNotifications?: boolean } = {}) {
  const target = new URL(db.url);
  const sockets = new Set<Socket>();
  let accepting = true;
  let stalled = false;
  let connections = 0;
  const waiting: Array<{ n: number; resolve: () => void }> = [];
  const server = createServer((client) => {
    if (!accepting) return client.destroy();
    connections++;
    for (const waiter of waiting.filter((w) => w.n <= connections)) {
      waiting.splice(waiting.indexOf(waiter), 1);
      waiter.resolve();
    }
    const upstream = connect(Number(target.port || 5432), target.hostname);
    // What the database sends, message by message (type byte, int32 length), to leave notifications out.
    let pending = Buffer.alloc(0);
    const fromDatabase = (chunk: Buffer): Buffer => {
      if (!options.dropNotifications) return chunk;
      pending = Buffer.concat([pending, chunk]);
      const out: Buffer[] = [];
      while (pending.length >= 5 && pending.length >= 1 + pending.readInt32BE(1)) {
        const size = 1 + pending.readInt32BE(1);
        if (pending[0] !== 0x41) out.push(pending.subarray(0, size));
        pending = pending.subarray(size);
      }
      return Buffer.concat(out);
    };
    for (const [from, to] of [[client, upstream], [upstream, client]] as const) {
      sockets.add(from);
      from.on('data', (chunk: Buffer) => {
        if (!stalled) to.write(from === upstream ? fromDatabase(chunk) : chunk);
      });
      from.on('error', () => undefined);
      from.on('close', () => {
        sockets.delete(from);
        to.destroy();
      });
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(db.url);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as AddressInfo).port);
  closing.push(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  return {
    url: url.toString(),
    cut: () => {
      for (const socket of sockets) socket.destroy();
    },
    refuse: () => void (accepting = false),
    accept: () => void (accepting = true),
    stall: () => void (stalled = true),
    connected: (n: number) => new Promise<void>((resolve) => (connections >= n ? resolve() : waiting.push({ n, resolve }))),
  };
}

describe('tiles that stay current across API processes', () => {
  let reader: Reader;
  beforeAll(async () => {
    reader = await startReader();
  });

  it('serves a cached tile with no query at all while its listener hears the changes', async () => {
    await create(11.0001, 48.0001, 'Ruhig');
    const p = path(tileOf(11.0001, 48.0001, 15));
    const first = await tile(reader, p);
    const hit = await cachedWithoutQuery(reader, p);
    expect(hit.bytes.equals(first.bytes)).toBe(true);
    expect(hit.etag).toBe(first.etag);
    expect(names(hit.bytes)).toContain('Ruhig');
  });

  it('an edit through one API process is in the tile another serves next, at every zoom, and a tile it does not meet stays cached', async () => {
    const id = await create(11.0101, 48.0101, 'Vorher');
    await create(11.3, 48.3, 'Anderswo');
    const touched = [8, 11, TILE_DETAIL_MIN_ZOOM, 16].map((z) => path(tileOf(11.0101, 48.0101, z)));
    const elsewhere = path(tileOf(11.3, 48.3, 14));
    const before = [];
    for (const p of touched) before.push(await cachedWithoutQuery(reader, p));
    const untouched = await cachedWithoutQuery(reader, elsewhere);

    const current = await writer.request('GET', `/api/features/${id}`);
    const edited = await writer.request('PUT', `/api/features/${id}`, {
      token: contributor,
      headers: { 'If-Match': current.headers.get('etag')! },
      body: { ...current.json, properties: { ...current.json.properties, name: 'Nachher' } },
    });
    expect(edited.status).toBe(200);
    await reader.heard(await latestSeq());

    for (const [i, p] of touched.entries()) {
      const after = await tile(reader, p);
      expect(after.cache).toBe('miss');
      // An overview carries no names: rebuilt, the same bytes and ETag.
      if (Number(p.split('/')[3]) < TILE_DETAIL_MIN_ZOOM) expect(after.etag).toBe(before[i]!.etag);
      else expect(names(after.bytes)).toContain('Nachher');
    }
    const still = await tile(reader, elsewhere);
    expect(still).toMatchObject({ cache: 'hit', queries: 0, etag: untouched.etag });
  });

  it('an edit by plain SQL (as GeoServer WFS-T or psql) is in the next tile too: a moved feature leaves one tile and reaches another', async () => {
    const id = await create(11.0201, 48.0201, 'Wandernd');
    const from = path(tileOf(11.0201, 48.0201, 16));
    const to = path(tileOf(11.0301, 48.0201, 16));
    expect(from).not.toBe(to);
    await cachedWithoutQuery(reader, from);
    await cachedWithoutQuery(reader, to);
    await db.pool.query(`UPDATE features.features SET geom = ST_SetSRID(ST_MakePoint(11.0301, 48.0201), 4326) WHERE id = $1`, [id]);
    await reader.heard(await latestSeq());
    expect(names((await tile(reader, from)).bytes)).not.toContain('Wandernd');
    expect(names((await tile(reader, to)).bytes)).toContain('Wandernd');
    expect((await tile(reader, to)).queries).toBe(0);
  });

  it('a rolled-back write notifies nobody and leaves the cached tile as it was', async () => {
    const id = await create(11.0401, 48.0401, 'Bleibt');
    const p = path(tileOf(11.0401, 48.0401, 15));
    const hit = await cachedWithoutQuery(reader, p);
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`UPDATE features.features SET name = 'Nie gesehen' WHERE id = $1`, [id]);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    // A later change elsewhere is heard; notifications come in commit order, so one of the
    // rolled-back write would have come (and dropped the tile) first.
    await create(12.5, 49.5, 'Danach');
    await reader.heard(await latestSeq());
    expect(await tile(reader, p)).toMatchObject({ cache: 'hit', queries: 0, etag: hit.etag });
  });
});

describe('when the listener cannot hear', () => {
  it('a listener connection ended by pg_terminate_backend never yields a stale tile: each tile is checked in the database until it listens again', async (context) => {
    if (db.kind !== 'postgres') {
      console.log('tiles-freshness: pg_terminate_backend ends a session of PostgreSQL; the embedded PGlite has one session for all (the relay tests below cut the connection instead); set TEST_DATABASE_URL');
      context.skip();
    }
    const others = await listenerPids();
    const reader = await startReader();
    const listener = (await listenerPids()).filter((pid) => !others.includes(pid));
    expect(listener).toHaveLength(1);
    await create(11.0501, 48.0501, 'Vor dem Abbruch');
    const p = path(tileOf(11.0501, 48.0501, 15));
    await cachedWithoutQuery(reader, p);

    const lost = reader.next('lost');
    const back = reader.next('regained');
    await db.pool.query('SELECT pg_terminate_backend($1::int)', [listener[0]]);
    await lost;
    await create(11.0502, 48.0502, 'Während des Abbruchs');
    const meanwhile = await tile(reader, p);
    if (!reader.feed.covered) {
      // Still reconnecting: the tile was checked in the database and rebuilt.
      expect(meanwhile.queries).toBeGreaterThan(0);
      expect(meanwhile.cache).toBe('miss');
    }
    expect(names(meanwhile.bytes)).toContain('Während des Abbruchs');

    expect((await back).caughtUp).toBe(true);
    // Built while not covered: checked once more, then trusted again.
    const checked = await tile(reader, p);
    expect(checked.bytes.equals(meanwhile.bytes)).toBe(true);
    expect((await tile(reader, p)).queries).toBe(0);
  });

  it('changes committed while the listener is disconnected are caught up when it reconnects, before any cached tile is served from memory', async () => {
    // Written before the reader starts: its watermark sees them, so the catch-up reads only what follows.
    await create(11.0601, 48.0601, 'Alt');
    await create(11.5, 48.5, 'Unberührt');
    const relay = await startRelay();
    const reader = await startReader({ connectionString: relay.url });
    const p = path(tileOf(11.0601, 48.0601, 14));
    const other = path(tileOf(11.5, 48.5, 14));
    const before = await cachedWithoutQuery(reader, p);
    const untouched = await cachedWithoutQuery(reader, other);

    relay.refuse();
    const lost = reader.next('lost');
    relay.cut();
    await lost;
    await create(11.0602, 48.0602, 'Neu, ungehört');
    const caughtUp = reader.next('changed');
    const back = reader.next('regained');
    relay.accept();
    // Applied from features.tile_changes (no seq: a catch-up, not a notification) before covering again.
    expect((await caughtUp).seq).toBeUndefined();
    expect((await back).caughtUp).toBe(true);

    const after = await tile(reader, p);
    expect(after.cache).toBe('miss');
    expect(after.etag).not.toBe(before.etag);
    expect(names(after.bytes)).toContain('Neu, ungehört');
    // What the catch-up did not meet is still served from memory.
    expect(await tile(reader, other)).toMatchObject({ cache: 'hit', queries: 0, etag: untouched.etag });
  });

  it('after changes were pruned while it was away, the listener trusts nothing cached before without asking once', async () => {
    const relay = await startRelay();
    const reader = await startReader({ connectionString: relay.url });
    await create(11.0701, 48.0701, 'Bestand');
    const p = path(tileOf(11.0701, 48.0701, 14));
    const before = await cachedWithoutQuery(reader, p);

    relay.refuse();
    const lost = reader.next('lost');
    relay.cut();
    await lost;
    await db.pool.query(`UPDATE features.features SET name = 'Umbenannt' WHERE name = 'Bestand'`);
    expect((await db.pool.query<{ n: number }>(`SELECT features.prune_tile_changes('0 seconds') AS n`)).rows[0]!.n).toBeGreaterThan(0);
    const back = reader.next('regained');
    relay.accept();
    expect((await back).caughtUp).toBe(false);

    const after = await tile(reader, p);
    expect(after.queries).toBeGreaterThan(0);
    expect(after.etag).not.toBe(before.etag);
    expect(names(after.bytes)).toContain('Umbenannt');
  });

  it('a listener whose connection goes silent is given up within its heartbeat, and tiles are checked in the database meanwhile', async () => {
    const relay = await startRelay();
    const reader = await startReader({ connectionString: relay.url, heartbeatMs: 150 });
    await create(11.0801, 48.0801, 'Still');
    const p = path(tileOf(11.0801, 48.0801, 15));
    await cachedWithoutQuery(reader, p);
    relay.refuse();
    const lost = reader.next('lost');
    relay.stall();
    await lost;
    await create(11.0802, 48.0802, 'Nach dem Schweigen');
    const meanwhile = await tile(reader, p);
    expect(meanwhile.queries).toBeGreaterThan(0);
    expect(names(meanwhile.bytes)).toContain('Nach dem Schweigen');
  });

  it('a listener that never hears a notification (as through a pooler in transaction mode) is never trusted: every tile is checked in the database', async () => {
    const relay = await startRelay({ dropNotifications: true });
    const reader = await startReader({ connectionString: relay.url, heartbeatMs: 150, covered: false });
    await create(11.0851, 48.0851, 'Ungehört');
    const p = path(tileOf(11.0851, 48.0851, 15));
    // The first connection gave up waiting for its heartbeat and a second one came.
    await relay.connected(2);
    expect(reader.feed.covered).toBe(false);
    await tile(reader, p);
    const second = await tile(reader, p);
    expect(second.queries).toBeGreaterThan(0);
    await create(11.0852, 48.0852, 'Trotzdem da');
    const after = await tile(reader, p);
    expect(after.queries).toBeGreaterThan(0);
    expect(names(after.bytes)).toContain('Trotzdem da');
  });

  it('a tile built before the pruning horizon is rebuilt by a process that checks in the database', async () => {
    // The writer has no listener: it asks the database on every request, as every process does while not covered.
    await create(11.0901, 48.0901, 'Horizont');
    const p = path(tileOf(11.0901, 48.0901, 15));
    await fetch(`${writer.url}${p}`);
    const hit = await fetch(`${writer.url}${p}`);
    expect(hit.headers.get('server-timing')).toContain('cache;desc=hit');
    // A change elsewhere, pruned: the horizon passes the tile's snapshot, so its freshness cannot be told.
    await create(12.9, 49.9, 'Woanders');
    await db.pool.query(`SELECT features.prune_tile_changes('0 seconds')`);
    const after = await fetch(`${writer.url}${p}`);
    expect(after.headers.get('server-timing')).toContain('cache;desc=miss');
    expect(after.headers.get('etag')).toBe(hit.headers.get('etag'));
  });
});

describe('what a change records (migration 023)', () => {
  it('one statement of 2 000 features: a few boxes per 0.02° cell in features.tile_changes and one notification of at most 40 boxes, far below 8000 bytes', async () => {
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    try {
      const heard: string[] = [];
      listener.on('notification', (n) => heard.push(n.payload ?? ''));
      await listener.query('LISTEN tile_changes');
      const seq = await latestSeq();
      await db.pool.query(`
        INSERT INTO features.features (id, name, kategorie, geom)
        SELECT 'bulk-' || i, 'Massenimport ' || i, 'denkmal', ST_SetSRID(ST_MakePoint(6 + (i % 50) * 0.05, 45 + (i / 50) * 0.05), 4326)
        FROM generate_series(0, 1999) i`);
      await listener.query('SELECT 1'); // its notifications arrive no later than this answer
      const { rows } = await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM features.tile_changes WHERE seq > $1::bigint', [seq]);
      expect(rows[0]!.n).toBe(2000); // 0.05° apart: one feature per 0.02° cell
      expect(heard).toHaveLength(1);
      expect(Buffer.byteLength(heard[0]!)).toBeLessThan(8000);
      const payload = JSON.parse(heard[0]!) as { seq: number; boxes: number[][] };
      expect(payload.boxes.length).toBeLessThanOrEqual(40);
      // Together the boxes cover every feature.
      const { rows: outside } = await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM features.tile_features t WHERE t.id LIKE 'bulk-%'
           AND NOT EXISTS (SELECT 1 FROM json_array_elements($1::json) b WHERE t.geom && ST_MakeEnvelope((b->>0)::float8, (b->>1)::float8, (b->>2)::float8, (b->>3)::float8, 3857))`,
        [JSON.stringify(payload.boxes)],
      );
      expect(outside[0]!.n).toBe(0);
    } finally {
      await listener.end();
    }
  });
});

describe('overview tiles within their size budget', () => {
  // One zoom-10 tile each, in EPSG:3857 metres; a pixel is the tile's width / 512.
  const Z = 10;
  const WORLD = 20_037_508.342789244;
  const size = (2 * WORLD) / 2 ** Z;
  const pixel = size / TILE_PIXELS;
  const origin = (x: number, y: number) => ({ x0: -WORLD + x * size, y0: WORLD - y * size });

  it('a tile of long zigzag lines over the budget keeps the largest first, in a deterministic order, within 500 KB', async () => {
    const t = { z: Z, x: 560, y: 360 };
    const { x0, y0 } = origin(t.x, t.y);
    // 420 lines of 400 vertices 12 px apart and up to 71 px high: every vertex costs about 4 bytes and none is simplified away.
    await db.pool.query(
      `INSERT INTO features.features (id, name, kategorie, geom)
       SELECT 'zig-' || lpad(i::text, 4, '0'), 'Zickzack ' || i, 'denkmal',
              ST_Transform(ST_SetSRID(ST_MakeLine(ARRAY(
                SELECT ST_MakePoint($1::float8 + (20 + (j % 40) * 12) * $3::float8, $2::float8 - (20 + (j / 40) * 40 + (j % 2) * (8 + i % 64)) * $3::float8)
                FROM generate_series(0, 399) j ORDER BY j)), 3857), 4326)
       FROM generate_series(0, 419) i`,
      [x0, y0, pixel],
    );
    const answer = await fetch(`${writer.url}${path(t)}`, { headers: { 'accept-encoding': 'identity' } });
    const bytes = Buffer.from(await answer.arrayBuffer());
    expect(bytes.length).toBeLessThanOrEqual(OVERVIEW_BUDGET_BYTES);
    expect(bytes.length).toBeGreaterThan(OVERVIEW_BUDGET_BYTES * 0.8);
    const kept = features(bytes).map((f) => f.number);
    expect(kept.length).toBeGreaterThan(100);
    expect(kept.length).toBeLessThan(420);
    // Exactly the first of the lines in the rule's order: the box's width + height descending, then number.
    const { rows } = await db.pool.query<{ number: string }>(
      `SELECT number FROM features.tile_features WHERE id LIKE 'zig-%'
       ORDER BY (ST_XMax(geom) - ST_XMin(geom)) + (ST_YMax(geom) - ST_YMin(geom)) DESC, number LIMIT $1::int`,
      [kept.length],
    );
    expect([...kept].sort((a, b) => Number(a) - Number(b))).toEqual(rows.map((r) => Number(r.number)).sort((a, b) => a - b));
    // The same bytes again (a rebuild by another process would give the same ETag).
    await db.pool.query(`UPDATE features.features SET name = name WHERE id = 'zig-0000'`);
    const again = Buffer.from(await (await fetch(`${writer.url}${path(t)}`, { headers: { 'accept-encoding': 'identity' } })).arrayBuffer());
    expect(again.equals(bytes)).toBe(true);
  });

  it('a dense tile keeps one feature smaller than a pixel per pixel (the lowest number) and simplifies the rest to the pixel', async () => {
    const t = { z: Z, x: 562, y: 360 };
    const { x0, y0 } = origin(t.x, t.y);
    // 150 straight lines of 1 000 vertices each (stored about 16 KB: the tile counts as dense) ...
    await db.pool.query(
      `INSERT INTO features.features (id, name, kategorie, geom)
       SELECT 'gerade-' || i, 'Gerade ' || i, 'denkmal',
              ST_Transform(ST_SetSRID(ST_MakeLine(ARRAY(
                SELECT ST_MakePoint($1::float8 + (20 + j * 0.4) * $3::float8, $2::float8 - (20 + i * 3) * $3::float8) FROM generate_series(0, 999) j ORDER BY j)), 3857), 4326)
       FROM generate_series(0, 149) i`,
      [x0, y0, pixel],
    );
    // ... and three clusters of 200 points, each within a tenth of a pixel around a pixel's centre.
    await db.pool.query(
      `INSERT INTO features.features (id, name, kategorie, geom)
       SELECT 'punkt-' || c || '-' || lpad(i::text, 3, '0'), 'Punkt', 'denkmal',
              ST_Transform(ST_SetSRID(ST_MakePoint($1::float8 + (480.5 + (i % 10) * 0.01) * $3::float8, $2::float8 - (100.5 + c * 100 + (i / 10) * 0.005) * $3::float8), 3857), 4326)
       FROM generate_series(0, 2) c, generate_series(0, 199) i ORDER BY c, i`,
      [x0, y0, pixel],
    );
    const answer = await fetch(`${writer.url}${path(t)}`, { headers: { 'accept-encoding': 'identity' } });
    const tileFeatures = features(Buffer.from(await answer.arrayBuffer()));
    const points = tileFeatures.filter((f) => f.type === 1);
    const lines = tileFeatures.filter((f) => f.type === 2);
    expect(lines).toHaveLength(150);
    for (const line of lines) expect(line.geometry.flat().length).toBeLessThanOrEqual(3);
    const { rows } = await db.pool.query<{ number: string }>(
      `SELECT min(t.number) AS number FROM features.tile_features t WHERE t.id LIKE 'punkt-%' GROUP BY split_part(t.id, '-', 2) ORDER BY 1`,
    );
    expect(points.map((p) => Number(p.number)).sort((a, b) => a - b)).toEqual(rows.map((r) => Number(r.number)));
  });
});
