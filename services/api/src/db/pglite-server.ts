import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import type { PGlite } from '@electric-sql/pglite';

/**
 * A PostgreSQL wire-protocol server in front of one PGlite instance, so `pg` (and any other client)
 * reaches the embedded database over TCP exactly as it reaches a real server.
 *
 * Why not PGLiteSocketServer from @electric-sql/pglite-socket: PGlite has a single backend session,
 * and that server interleaves the protocol messages of concurrent connections one by one. Two pooled
 * connections sending Parse/Bind/Execute/Sync at the same time clobber each other's unnamed statement
 * ("portal does not exist", electric-sql/pglite#1046), and one thrown error stalls its queue for good.
 *
 * Invariant kept here: the session belongs to one connection from its first message until the
 * backend is idle again — the connection's last message was a Sync or simple Query and no
 * transaction block is open. Other connections wait their turn. So a transaction, or an extended-
 * protocol batch, always runs on its own connection without interleaving; nothing else is shared.
 * The cost is that everything is serialised, which PGlite does anyway. What outlives a handover is
 * named prepared statements, so each connection gets its own namespace for them (StatementNames),
 * and LISTEN registrations, so notifications go to the connections that listen (Listeners).
 *
 * PGlite 0.5.x answers an error inside an extended-protocol batch with one ReadyForQuery too many:
 * right after the ErrorResponse, although the backend then skips messages until Sync and answers
 * the Sync with its own ReadyForQuery (so Parse/Bind/Execute+Sync gets "E Z Z", and a batch ended
 * by Flush gets a Z it must not). A pg client takes that stray Z as the end of its next query, and
 * every answer after it lands on the wrong query ("Received unexpected commandComplete message").
 * BackendReplies therefore lets through exactly the ReadyForQuery messages a PostgreSQL backend
 * sends — one per Sync, none while skipping until Sync — see Connection.execute.
 */

const SSL_REQUEST = 80877103;
const GSS_ENC_REQUEST = 80877104;
const CANCEL_REQUEST = 80877102;
const PROTOCOL_3 = 196608;
/** Frontend message types; a Sync or a Query is answered with ReadyForQuery. */
const SYNC = 0x53; // 'S'
const QUERY = 0x51; // 'Q'
const TERMINATE = 0x58; // 'X'
const PARSE = 0x50; // 'P'
const BIND = 0x42; // 'B'
const DESCRIBE = 0x44; // 'D'
const CLOSE = 0x43; // 'C'
/** Describe and Close name a prepared statement ('S') or a portal ('P'). */
const STATEMENT = 0x53;
/** Parse, Bind, Describe, Execute, Close, Flush, Sync: the extended query protocol. */
const EXTENDED_PROTOCOL = new Set([PARSE, BIND, DESCRIBE, 0x45, CLOSE, 0x48, SYNC]);
/** Backend message types. */
const READY_FOR_QUERY = 0x5a; // 'Z'
const ERROR_RESPONSE = 0x45; // 'E'
const NOTIFICATION_RESPONSE = 0x41; // 'A'
/**
 * Ends whatever the backend was in the middle of for a vanished client: Execute of a portal that
 * cannot exist fails, which aborts an unfinished extended batch (its implicit transaction never
 * commits), and the Sync then brings the backend back to idle. Portal name: "\0"-free, not pg's.
 */
const ABANDON_BATCH = Buffer.concat([frontendMessage('E', Buffer.from('pglite-server: abandoned\0\0\0\0\0')), frontendMessage('S', Buffer.alloc(0))]);

export interface PGliteServer {
  /** host:port the server listens on. */
  host: string;
  port: number;
  close(): Promise<void>;
}

class SessionLock {
  private owner: Connection | null = null;
  private readonly waiting: Array<{ connection: Connection; resume: () => void }> = [];

  async acquire(connection: Connection): Promise<void> {
    if (this.owner === connection) return;
    if (this.owner === null) {
      this.owner = connection;
      return;
    }
    await new Promise<void>((resume) => this.waiting.push({ connection, resume }));
  }

  release(connection: Connection): void {
    if (this.owner !== connection) return;
    const next = this.waiting[0];
    this.owner = next ? next.connection : null;
    // A connection can wait twice (a batch, and its close tidying up): all its waits end together.
    for (const entry of this.takeWaits(next?.connection)) entry.resume();
  }

  /** A closed connection leaves the queue (and hands the session on if it held it). */
  forget(connection: Connection): void {
    for (const entry of this.takeWaits(connection)) entry.resume();
    this.release(connection);
  }

  private takeWaits(connection: Connection | undefined): Array<{ resume: () => void }> {
    const taken = this.waiting.filter((w) => w.connection === connection);
    for (const entry of taken) this.waiting.splice(this.waiting.indexOf(entry), 1);
    return taken;
  }

  holds(connection: Connection): boolean {
    return this.owner === connection;
  }
}

/**
 * Which connection listens on which channel. The one backend session holds the LISTENs of every
 * connection and hands each notification to whoever runs at that moment (often the notifier); here
 * it goes to the connections that asked for it instead, as a PostgreSQL server delivers it.
 * Registrations are read from the SQL a client sends (LISTEN/UNLISTEN statements) — a LISTEN in a
 * transaction that is rolled back still counts, which at worst delivers a few notifications more.
 */
class Listeners {
  private readonly channels = new Map<Connection, Set<string>>();

  /**
   * Notes the LISTEN/UNLISTEN statements in a Query or Parse message of this connection; true if it
   * has an UNLISTEN, which on the shared backend may stop the listening of others too.
   */
  note(connection: Connection, message: Buffer): boolean {
    if (message[0] !== QUERY && message[0] !== PARSE) return false;
    const start = message[0] === QUERY ? 5 : message.indexOf(0, 5) + 1; // Parse: after the statement name
    const text = message.subarray(start, Math.max(start, message.indexOf(0, start))).toString('utf8');
    if (!/listen/i.test(text)) return false;
    let unlisten = false;
    for (const [, verb, channel] of text.matchAll(LISTEN_STATEMENT)) {
      const own = this.channels.get(connection) ?? new Set<string>();
      this.channels.set(connection, own);
      if (verb!.toUpperCase() === 'LISTEN') own.add(channelName(channel!));
      else {
        if (channel === '*') own.clear();
        else own.delete(channelName(channel!));
        unlisten = true;
      }
    }
    return unlisten;
  }

  /** Hands a NotificationResponse to every connection listening on its channel. */
  deliver(notification: Buffer): void {
    const start = 9; // type, length, notifying backend's pid
    const channel = notification.subarray(start, notification.indexOf(0, start)).toString('utf8');
    for (const [connection, own] of this.channels) if (own.has(channel)) connection.notify(notification);
  }

  forget(connection: Connection): void {
    this.channels.delete(connection);
  }

  /** After an UNLISTEN, the statements that make the backend listen again for everyone else. */
  relisten(): string | null {
    const wanted = new Set([...this.channels.values()].flatMap((own) => [...own]));
    return wanted.size === 0 ? null : [...wanted].map((c) => `LISTEN "${c.replaceAll('"', '""')}";`).join(' ');
  }
}

/** LISTEN/UNLISTEN at the start of a statement, with a plain or double-quoted channel, or UNLISTEN *. */
const LISTEN_STATEMENT = /(?:^|;)\s*(UNLISTEN|LISTEN)\s+(\*|"(?:[^"]|"")+"|[^\s;"\0]+)/gi;

function channelName(identifier: string): string {
  return identifier.startsWith('"') ? identifier.slice(1, -1).replaceAll('""', '"') : identifier.toLowerCase();
}

/**
 * Named prepared statements of one client, renamed on the way in to "pgls<connection>:<name>": on
 * the shared backend two clients' "S_1" would clash ("prepared statement already exists") or, worse,
 * one client would run the other's. Portals need no such care: they end with their transaction, and
 * a transaction never spans a handover. Unnamed statements are the backend's one scratch slot, which
 * is fine because a connection keeps the session from Parse to Sync.
 */
class StatementNames {
  private static connections = 0;
  private readonly prefix = `pgls${++StatementNames.connections}:`;
  /** Statements this connection created and has not closed, to close when it goes away. */
  readonly open = new Set<string>();

  rename(message: Buffer): Buffer {
    switch (message[0]) {
      case PARSE:
        return this.renameAt(message, 5, 'parse');
      case BIND:
        return this.renameAt(message, message.indexOf(0, 5) + 1, 'use');
      case DESCRIBE:
        return message[5] === STATEMENT ? this.renameAt(message, 6, 'use') : message;
      case CLOSE:
        return message[5] === STATEMENT ? this.renameAt(message, 6, 'close') : message;
      default:
        return message;
    }
  }

  /** Messages that close every statement still open, then a Sync. */
  closeAll(): Buffer {
    const closes = [...this.open].map((name) => frontendMessage('C', Buffer.concat([Buffer.from([STATEMENT]), Buffer.from(`${name}\0`)])));
    this.open.clear();
    return Buffer.concat([...closes, frontendMessage('S', Buffer.alloc(0))]);
  }

  private renameAt(message: Buffer, start: number, use: 'parse' | 'use' | 'close'): Buffer {
    const end = message.indexOf(0, start);
    if (start <= 0 || end < 0 || end === start) return message; // unnamed, or malformed: the backend says so
    const name = this.prefix + message.subarray(start, end).toString('utf8');
    if (use === 'parse') this.open.add(name);
    if (use === 'close') this.open.delete(name);
    const body = Buffer.concat([message.subarray(5, start), Buffer.from(name), message.subarray(end)]);
    return frontendMessage(String.fromCharCode(message[0]!), body);
  }
}

class Connection {
  private readonly statements = new StatementNames();
  private buffer: Buffer = Buffer.alloc(0);
  private started = false;
  private busy = false;
  /** Data came in while a batch was running: look at the buffer again when it is done. */
  private arrivedWhileBusy = false;
  private closed = false;
  /** An extended-protocol message of this connection failed; the backend ignores all until Sync. */
  private skippingTillSync = false;
  /** This connection sent an UNLISTEN: when it hands the session on, others' LISTENs are restored. */
  private unlistened = false;

  constructor(
    private readonly socket: Socket,
    private readonly db: PGlite,
    private readonly lock: SessionLock,
    private readonly listeners: Listeners,
  ) {
    socket.setNoDelay(true);
    socket.on('data', (chunk) => {
      this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
      if (this.busy) this.arrivedWhileBusy = true;
      else void this.pump();
    });
    socket.on('error', () => socket.destroy());
    socket.on('close', () => void this.onClose());
  }

  /** Split off the complete messages at the front of the buffer (startup messages have no type byte). */
  private takeMessages(): Buffer[] {
    const messages: Buffer[] = [];
    let offset = 0;
    for (;;) {
      const headerSize = this.started ? 5 : 4;
      if (this.buffer.length - offset < headerSize) break;
      const length = this.started ? 1 + this.buffer.readInt32BE(offset + 1) : this.buffer.readInt32BE(offset);
      if (length < headerSize || this.buffer.length - offset < length) break;
      const message = this.buffer.subarray(offset, offset + length);
      offset += length;
      messages.push(message);
      if (!this.started && message.length >= 8 && message.readInt32BE(4) === PROTOCOL_3) this.started = true;
    }
    this.buffer = this.buffer.subarray(offset);
    return messages;
  }

  private async pump(): Promise<void> {
    if (this.busy || this.closed) return;
    this.busy = true;
    try {
      for (;;) {
        this.arrivedWhileBusy = false;
        if (this.closed) break;
        const messages = this.takeMessages();
        if (messages.length === 0) break;
        const forward: Buffer[] = [];
        for (const message of messages) {
          if (message.length === 8 && [SSL_REQUEST, GSS_ENC_REQUEST].includes(message.readInt32BE(4))) {
            this.socket.write('N'); // no TLS on a loopback embedded database
          } else if (message.length === 16 && message.readInt32BE(4) === CANCEL_REQUEST) {
            this.socket.end(); // cancellation is not supported by a single-session backend
          } else if (message[0] === TERMINATE && this.started) {
            await this.flush(forward.splice(0));
            this.socket.end();
            return;
          } else {
            if (this.started && this.listeners.note(this, message)) this.unlistened = true;
            forward.push(this.started ? this.statements.rename(message) : message);
          }
        }
        await this.flush(forward);
      }
    } catch {
      // A failure inside PGlite: drop this connection so its client sees an error instead of a hang.
      this.socket.destroy();
    } finally {
      this.busy = false;
    }
    // Only new data can complete a message that was incomplete a moment ago; re-examining the same
    // partial buffer would recurse without end.
    if (this.arrivedWhileBusy && !this.closed) void this.pump();
  }

  private async flush(messages: Buffer[]): Promise<void> {
    if (messages.length === 0) return;
    const last = messages[messages.length - 1]!;
    if (this.closed) return;
    await this.lock.acquire(this);
    if (this.closed) return; // onClose tidies up and hands the session on
    const runs = splitIntoRuns(messages);
    await this.db.runExclusive(async () => {
      for (const [index, run] of runs.entries()) await this.execute(run, index === runs.length - 1);
    });
    const atSyncPoint = !this.started || last[0] === SYNC || last[0] === QUERY || isStartup(last);
    if (atSyncPoint && !this.skippingTillSync && !this.db.isInTransaction()) {
      await this.listenAgainForOthers();
      this.lock.release(this);
    }
  }

  /** The session is idle and still ours: restore LISTENs another connection's UNLISTEN took away. */
  private async listenAgainForOthers(): Promise<void> {
    if (!this.unlistened) return;
    this.unlistened = false;
    const statements = this.listeners.relisten();
    if (statements === null) return;
    await this.db.runExclusive(() =>
      this.db.execProtocolRawStream(new Uint8Array(frontendMessage('Q', Buffer.from(`${statements}\0`))), { onRawData: () => undefined }),
    );
  }

  /** A notification for a channel this connection listens on (the protocol allows one at any time). */
  notify(notification: Buffer): void {
    if (this.socket.writable) this.socket.write(notification);
  }

  /**
   * Runs one run of messages on the backend and forwards its replies, with ReadyForQuery exactly as
   * a PostgreSQL backend sends it: an extended run gets one, for its Sync, or none if it has no Sync
   * (then an error in it means the backend skips everything up to the next Sync, which answers for
   * all of them); any other message gets its own, unless the backend is skipping it.
   */
  private async execute(run: Run, syncToFs: boolean): Promise<void> {
    const replies = new BackendReplies(
      (data) => {
        if (this.socket.writable) this.socket.write(data);
      },
      (notification) => this.listeners.deliver(notification),
    );
    await this.db.execProtocolRawStream(new Uint8Array(Buffer.concat(run.messages)), {
      syncToFs,
      onRawData: (data) => replies.push(Buffer.from(data)),
    });
    const { readyForQuery, errorSeen } = replies.finish();
    let answerReady: boolean;
    if (run.extended) {
      answerReady = run.endsWithSync;
      if (run.endsWithSync) this.skippingTillSync = false;
      else if (errorSeen) this.skippingTillSync = true;
    } else {
      answerReady = !this.skippingTillSync;
    }
    if (answerReady && readyForQuery && this.socket.writable) this.socket.write(readyForQuery);
  }

  private async onClose(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.listeners.forget(this);
    const holding = this.lock.holds(this);
    if (holding || this.statements.open.size > 0) {
      try {
        // Its prepared statements would otherwise live on in the shared session: wait for it.
        if (!holding) await this.lock.acquire(this);
        // A client that vanished mid-batch or mid-transaction must not leave the session in its
        // batch (skipping messages, or about to commit it at the next Sync) or its transaction.
        // Nobody reads the replies: the client is gone.
        const discard = { onRawData: () => undefined };
        await this.db.runExclusive(async () => {
          if (holding) await this.db.execProtocolRawStream(new Uint8Array(ABANDON_BATCH), discard);
          if (this.statements.open.size > 0) await this.db.execProtocolRawStream(new Uint8Array(this.statements.closeAll()), discard);
        });
        if (this.db.isInTransaction()) await this.db.exec('ROLLBACK');
      } catch {
        /* the session is reset by the next statement anyway */
      }
    }
    this.lock.forget(this);
  }
}

interface Run {
  messages: Buffer[];
  /** Extended-protocol messages, up to and including a Sync if there is one. */
  extended: boolean;
  endsWithSync: boolean;
}

/** Extended-protocol messages run up to each Sync; every other message runs on its own. */
function splitIntoRuns(messages: Buffer[]): Run[] {
  const runs: Run[] = [];
  let extended: Buffer[] = [];
  const endExtended = (endsWithSync: boolean) => {
    if (extended.length > 0) runs.push({ messages: extended, extended: true, endsWithSync });
    extended = [];
  };
  for (const message of messages) {
    if (!isStartup(message) && EXTENDED_PROTOCOL.has(message[0]!)) {
      extended.push(message);
      if (message[0] === SYNC) endExtended(true);
    } else {
      endExtended(false);
      runs.push({ messages: [message], extended: false, endsWithSync: false });
    }
  }
  endExtended(false);
  return runs;
}

/**
 * The backend's reply stream to one run, forwarded as it comes except for ReadyForQuery, which is
 * held back (the caller decides whether the run earns one; it is always the run's last message),
 * and notifications, which go to their listeners.
 * Messages may be split across chunks; large ones stream through without being buffered whole.
 */
class BackendReplies {
  /** The start of a message whose header (or, for ReadyForQuery, whole body) is incomplete. */
  private pending: Buffer = Buffer.alloc(0);
  /** Bytes of the current message still to forward unchanged. */
  private passing = 0;
  private readyForQuery: Buffer | null = null;
  private errorSeen = false;

  constructor(
    private readonly forward: (data: Buffer) => void,
    private readonly notification: (message: Buffer) => void,
  ) {}

  push(chunk: Buffer): void {
    const out: Buffer[] = [];
    let offset = 0;
    while (offset < chunk.length) {
      if (this.passing > 0) {
        const n = Math.min(this.passing, chunk.length - offset);
        out.push(chunk.subarray(offset, offset + n));
        this.passing -= n;
        offset += n;
        continue;
      }
      const headerNeeded = 5 - this.pending.length;
      if (headerNeeded > 0) {
        const n = Math.min(headerNeeded, chunk.length - offset);
        this.pending = Buffer.concat([this.pending, chunk.subarray(offset, offset + n)]);
        offset += n;
        if (this.pending.length < 5) break;
      }
      const type = this.pending[0];
      const size = 1 + this.pending.readInt32BE(1);
      if (type === READY_FOR_QUERY || type === NOTIFICATION_RESPONSE) {
        const n = Math.min(size - this.pending.length, chunk.length - offset);
        this.pending = Buffer.concat([this.pending, chunk.subarray(offset, offset + n)]);
        offset += n;
        if (this.pending.length < size) break;
        if (type === READY_FOR_QUERY) {
          this.readyForQuery = this.pending; // only the last one counts: it carries the final status
        } else {
          // Routed to its listeners; what came before it goes out first, keeping the order.
          if (out.length > 0) this.forward(Buffer.concat(out.splice(0)));
          this.notification(this.pending);
        }
      } else {
        if (type === ERROR_RESPONSE) this.errorSeen = true;
        out.push(this.pending);
        this.passing = size - this.pending.length;
      }
      this.pending = Buffer.alloc(0);
    }
    if (out.length > 0) this.forward(out.length === 1 ? out[0]! : Buffer.concat(out));
  }

  finish(): { readyForQuery: Buffer | null; errorSeen: boolean } {
    return { readyForQuery: this.readyForQuery, errorSeen: this.errorSeen };
  }
}

function frontendMessage(type: string, body: Buffer): Buffer {
  const header = Buffer.alloc(5);
  header.write(type, 0, 'latin1');
  header.writeInt32BE(4 + body.length, 1);
  return Buffer.concat([header, body]);
}

function isStartup(message: Buffer): boolean {
  return message.length >= 8 && message.readInt32BE(4) === PROTOCOL_3;
}

export async function servePGlite(db: PGlite, options: { host?: string; port?: number } = {}): Promise<PGliteServer> {
  const host = options.host ?? '127.0.0.1';
  const lock = new SessionLock();
  const listeners = new Listeners();
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    new Connection(socket, db, lock, listeners);
  });
  const port = await new Promise<number>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => resolve((server.address() as AddressInfo).port));
  });
  return {
    host,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
