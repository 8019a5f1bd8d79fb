import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { Logger } from 'pino';
import type { Queryable } from '../db/pool.js';
import type { Box } from './bounds.js';

/**
 * The changes to features.features, heard by this API process as they commit: the notifications that
 * migration 023's triggers send for every writer (API, GeoServer WFS-T, SQL, imports), on one
 * connection of its own (a pg Client, not the pool's: a LISTEN belongs to a session, and a pooled
 * connection's queries would hold notifications up while they run).
 *
 * Glossary:
 * - covered: every change committed from now on reaches this process. True from the moment the
 *   connection listens and has caught up, false from the moment it is lost; while false, the tile
 *   service asks the database about every tile (tiles/service.ts), so nothing stale is served.
 * - session: a number that changes whenever `covered` does. A read that saw the same session start and
 *   end, covered, heard every change committed while it ran.
 * - watermark: a snapshot (pg_current_snapshot) of which every committed change has been heard. After
 *   a lost connection the feed listens again and then reads the changes the watermark does not see
 *   (features.tile_changes by xid, an index lookup) before it counts as covered: what was committed
 *   while nobody listened is caught up, and the cache is kept. A sequence number could not do this:
 *   sequence values are taken in call order and transactions commit in another (migration 023).
 * - heartbeat: every `heartbeatMs` the feed notifies itself on a channel of its own, with the snapshot
 *   of that statement. PostgreSQL delivers notifications in commit order, so once its own comes back,
 *   every change that snapshot sees has been heard before it: the snapshot becomes the watermark. One
 *   that does not come back within `heartbeatMs` means a connection that is gone without saying so
 *   (a dead peer, a cut network): the feed drops it and counts as not covered.
 */
export const TILE_CHANGES_CHANNEL = 'tile_changes';

export interface TileChangeSubscriber {
  /** Committed changes met these boxes: whatever they meet is out of date. `seq`: the writing statement's last row. */
  changed(boxes: readonly Box[], seq: number | undefined): void;
  /** Not covered any more: changes may go unheard from now on. */
  lost(): void;
  /**
   * Covered again. `caughtUp` false: what was committed before cannot be told (the first connection,
   * a watermark older than the pruned changes, too many changes to read): nothing known before may be
   * trusted without asking the database once.
   */
  regained(caughtUp: boolean): void;
}

export interface TileChangeFeed {
  readonly covered: boolean;
  readonly session: number;
  /** Adds a subscriber; returns its removal. */
  subscribe(subscriber: TileChangeSubscriber): () => void;
  /** Stops listening and pruning; subscribers are told `lost`. */
  close(): Promise<void>;
}

export interface TileChangeFeedOptions {
  connectionString: string;
  /** Where old changes are pruned from (the API's pool, never the listening connection). */
  db: Queryable;
  logger?: Logger;
  /** How often the feed checks its connection and moves its watermark (default 5 s); also how long an answer may take. */
  heartbeatMs?: number;
  /** How often old changes are pruned (default 5 minutes; 0: never). */
  pruneEveryMs?: number;
  /** How long changes are kept (PostgreSQL interval, default 1 hour): how long a connection may be lost and caught up. */
  keep?: string;
  /** Waits between connection attempts: doubling from `min` up to `max` ms (default 100 ms to 10 s), with jitter. */
  retry?: { min: number; max: number };
}

/** The most changes a catch-up reads; more, and the cache is asked about instead (regained(false)). */
const CATCH_UP_LIMIT = 10_000;

/**
 * Starts listening at once (in the background: the API answers meanwhile, asking the database about
 * each tile until the feed is covered) and keeps listening until close(), reconnecting after any loss.
 */
export function startTileChangeFeed(options: TileChangeFeedOptions): TileChangeFeed {
  const { connectionString, db, logger } = options;
  const heartbeatMs = options.heartbeatMs ?? 5_000;
  const retry = options.retry ?? { min: 100, max: 10_000 };
  const keep = options.keep ?? '1 hour';
  // The heartbeat's own channel: only this process hears it.
  const ownChannel = `tile_changes_${randomUUID().replaceAll('-', '')}`;
  const subscribers = new Set<TileChangeSubscriber>();
  let covered = false;
  let session = 0;
  let closed = false;
  let current: pg.Client | undefined;
  let watermark: string | undefined;
  let wake: (() => void) | undefined;

  const setCovered = (value: boolean, caughtUp = true): void => {
    if (covered === value) return;
    covered = value;
    session++;
    for (const subscriber of subscribers) {
      if (value) subscriber.regained(caughtUp);
      else subscriber.lost();
    }
  };
  const changed = (boxes: readonly Box[], seq: number | undefined): void => {
    for (const subscriber of subscribers) subscriber.changed(boxes, seq);
  };

  /** Heartbeats sent and not yet back: their statement's snapshot once answered, whether heard, and who waits. */
  const beats = new Map<string, { snapshot?: string; heard?: boolean; settled: () => void }>();
  let beatCount = 0;
  const settleBeat = (id: string): void => {
    const beat = beats.get(id);
    if (!beat?.heard || beat.snapshot === undefined) return;
    // Heartbeats come back in the order they were sent: older ones still missing are lost with the connection anyway.
    watermark = beat.snapshot;
    beats.delete(id);
    beat.settled();
  };

  function onNotification(message: pg.Notification): void {
    if (message.channel === ownChannel) {
      const beat = beats.get(message.payload ?? '');
      if (beat) {
        beat.heard = true;
        settleBeat(message.payload!);
      }
      return;
    }
    if (message.channel !== TILE_CHANGES_CHANNEL) return;
    const parsed = parsePayload(message.payload);
    if (!parsed) logger?.warn({ payload: message.payload?.slice(0, 200) }, 'unreadable tile change notification: every cached tile is dropped');
    changed(parsed?.boxes ?? [WHOLE_WORLD], parsed?.seq);
  }

  /**
   * After LISTEN: the changes the watermark does not see, applied, and the new watermark (the
   * statement's snapshot, taken after LISTEN, so anything it does not see will be notified).
   */
  async function catchUp(client: pg.Client): Promise<boolean> {
    if (watermark === undefined) {
      // Read from the changes' own table: until migration 023 exists there is nothing to listen for.
      watermark = (await client.query<{ snapshot: string }>('SELECT pg_current_snapshot()::text AS snapshot FROM features.tile_changes_horizon')).rows[0]!.snapshot;
      return true;
    }
    const { rows } = await client.query<{ snapshot: string; complete: boolean; boxes: Box[] | null }>(
      `SELECT pg_current_snapshot()::text AS snapshot,
              (SELECT h.xid FROM features.tile_changes_horizon h) < pg_snapshot_xmin($1::pg_snapshot) AS complete,
              (SELECT json_agg(json_build_array(ST_XMin(c.box), ST_YMin(c.box), ST_XMax(c.box), ST_YMax(c.box)))
               FROM (SELECT box FROM features.tile_changes
                     WHERE xid >= pg_snapshot_xmin($1::pg_snapshot) AND NOT pg_visible_in_snapshot(xid, $1::pg_snapshot)
                     LIMIT $2::int) c) AS boxes`,
      [watermark, CATCH_UP_LIMIT + 1],
    );
    const row = rows[0]!;
    watermark = row.snapshot;
    const boxes = row.boxes ?? [];
    if (!row.complete || boxes.length > CATCH_UP_LIMIT) return false;
    if (boxes.length > 0) changed(boxes, undefined);
    return true;
  }

  /**
   * One heartbeat: resolves once its statement has answered and its notification come back (then its
   * snapshot is the watermark). One that has not within `heartbeatMs` cuts the connection.
   */
  function heartbeat(client: pg.Client): Promise<void> {
    const id = `${++beatCount}`;
    const settled = new Promise<void>((resolve) => beats.set(id, { settled: resolve }));
    const overdue = setTimeout(() => {
      if (beats.has(id) && current === client) {
        logger?.warn({ heartbeatMs }, 'tile change listener: no answer to its heartbeat; reconnecting');
        cut(client);
      }
    }, heartbeatMs);
    overdue.unref();
    void settled.then(() => clearTimeout(overdue));
    client
      .query<{ snapshot: string }>('SELECT pg_current_snapshot()::text AS snapshot, pg_notify($1::text, $2::text)', [ownChannel, id])
      .then(({ rows }) => {
        const beat = beats.get(id);
        if (!beat) return;
        beat.snapshot = rows[0]!.snapshot;
        settleBeat(id);
      })
      .catch(() => undefined); // the connection's end or error ends the session below
    return settled;
  }

  /** The end of a connection that may not end by itself (a dead peer): its socket is destroyed. */
  function cut(client: pg.Client): void {
    (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
  }

  async function run(): Promise<void> {
    let attempt = 0;
    while (!closed) {
      const client = new pg.Client({ connectionString, application_name: 'feature-api-tile-changes', keepAlive: true, connectionTimeoutMillis: 10_000 });
      let ended!: () => void;
      const gone = new Promise<void>((resolve) => (ended = resolve));
      client.on('error', (error) => {
        logger?.warn({ err: error }, 'tile change listener: connection failed');
        ended();
      });
      client.on('end', () => ended());
      client.on('notification', onNotification);
      let beating: NodeJS.Timeout | undefined;
      try {
        await client.connect();
        current = client;
        if (closed) break;
        await client.query(`LISTEN ${TILE_CHANGES_CHANNEL}; LISTEN ${ownChannel}`);
        const caughtUp = await catchUp(client);
        // Covered only once a notification has come back on this connection: through a pooler in
        // transaction mode (PgBouncer), for one, a LISTEN hears nothing, and the heartbeat never returns.
        await Promise.race([heartbeat(client), gone.then(() => Promise.reject(new Error('the connection ended before its first heartbeat came back')))]);
        if (closed) break;
        attempt = 0;
        setCovered(true, caughtUp);
        logger?.debug({ caughtUp }, 'tile change listener: listening');
        beating = setInterval(() => void heartbeat(client), heartbeatMs);
        beating.unref();
        await gone;
      } catch (error) {
        if (!closed) logger?.warn({ err: error }, 'tile change listener: could not listen');
      } finally {
        clearInterval(beating);
        beats.clear(); // their waiters are gone with the connection
        current = undefined;
        setCovered(false);
        await client.end().catch(() => undefined);
      }
      if (closed) break;
      const wait = Math.min(retry.max, retry.min * 2 ** attempt++) * (0.5 + Math.random() / 2);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, wait);
        timer.unref();
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wake = undefined;
    }
  }
  const running = run();

  const pruneEveryMs = options.pruneEveryMs ?? 300_000;
  const pruning =
    pruneEveryMs > 0
      ? setInterval(() => {
          db.query('SELECT features.prune_tile_changes($1::interval)', [keep]).catch((error: unknown) => logger?.warn({ err: error }, 'could not prune old tile changes'));
        }, pruneEveryMs)
      : undefined;
  pruning?.unref();

  return {
    get covered() {
      return covered;
    },
    get session() {
      return session;
    },
    subscribe(subscriber) {
      subscribers.add(subscriber);
      return () => subscribers.delete(subscriber);
    },
    async close() {
      closed = true;
      clearInterval(pruning);
      wake?.();
      if (current) await current.end().catch(() => undefined);
      await running;
      setCovered(false);
    },
  };
}

/** The box of everything (a notification that cannot be read drops every cached tile). */
const WHOLE_WORLD: Box = [-Infinity, -Infinity, Infinity, Infinity];

/** `{"seq": n, "boxes": [[x0, y0, x1, y1], …]}` as migration 023 sends it, or undefined. */
function parsePayload(payload: string | undefined): { seq: number; boxes: Box[] } | undefined {
  try {
    const parsed = JSON.parse(payload ?? '') as { seq?: unknown; boxes?: unknown };
    if (typeof parsed.seq !== 'number' || !Array.isArray(parsed.boxes)) return undefined;
    const boxes = parsed.boxes as unknown[];
    if (!boxes.every((b): b is Box => Array.isArray(b) && b.length === 4 && b.every((n) => typeof n === 'number'))) return undefined;
    return { seq: parsed.seq, boxes };
  } catch {
    return undefined;
  }
}
