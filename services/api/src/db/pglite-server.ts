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
 * The cost is that everything is serialised, which PGlite does anyway.
 */

const SSL_REQUEST = 80877103;
const GSS_ENC_REQUEST = 80877104;
const CANCEL_REQUEST = 80877102;
const PROTOCOL_3 = 196608;
/** Frontend messages after which the backend sends ReadyForQuery. */
const SYNC = 0x53; // 'S'
const QUERY = 0x51; // 'Q'
const TERMINATE = 0x58; // 'X'

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
    const next = this.waiting.shift();
    this.owner = next ? next.connection : null;
    next?.resume();
  }

  /** A closed connection leaves the queue (and hands the session on if it held it). */
  forget(connection: Connection): void {
    const index = this.waiting.findIndex((w) => w.connection === connection);
    if (index >= 0) this.waiting.splice(index, 1)[0]!.resume();
    this.release(connection);
  }

  holds(connection: Connection): boolean {
    return this.owner === connection;
  }
}

class Connection {
  private buffer: Buffer = Buffer.alloc(0);
  private started = false;
  private busy = false;
  /** Data came in while a batch was running: look at the buffer again when it is done. */
  private arrivedWhileBusy = false;
  private closed = false;

  constructor(
    private readonly socket: Socket,
    private readonly db: PGlite,
    private readonly lock: SessionLock,
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
            forward.push(message);
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
    await this.lock.acquire(this);
    if (this.closed) return;
    await this.db.runExclusive(() =>
      this.db.execProtocolRawStream(new Uint8Array(Buffer.concat(messages)), {
        onRawData: (data) => {
          if (data.length > 0 && this.socket.writable) this.socket.write(Buffer.from(data));
        },
      }),
    );
    const atSyncPoint = !this.started || last[0] === SYNC || last[0] === QUERY || isStartup(last);
    if (atSyncPoint && !this.db.isInTransaction()) this.lock.release(this);
  }

  private async onClose(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.lock.holds(this)) {
      // A client that vanished mid-transaction must not leave the shared session in its transaction.
      try {
        if (this.db.isInTransaction()) await this.db.exec('ROLLBACK');
      } catch {
        /* the session is reset by the next statement anyway */
      }
    }
    this.lock.forget(this);
  }
}

function isStartup(message: Buffer): boolean {
  return message.length >= 8 && message.readInt32BE(4) === PROTOCOL_3;
}

export async function servePGlite(db: PGlite, options: { host?: string; port?: number } = {}): Promise<PGliteServer> {
  const host = options.host ?? '127.0.0.1';
  const lock = new SessionLock();
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    new Connection(socket, db, lock);
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
