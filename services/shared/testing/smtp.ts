/**
 * An in-process SMTP server (smtp-server) on 127.0.0.1 that collects every message it accepts.
 * It can be stopped and started again on the same port, to show that mail sent while it was down
 * arrives once it is back. Recipients listed in `rejectRecipients` get a permanent 550; the first
 * message whose subject `deferOnce` matches gets a transient 451 after its data (a full mailbox, a
 * greylisting server), and is accepted when sent again.
 */
import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';
import { parseMail, type ParsedMail } from './mime.js';

export interface ReceivedMail extends ParsedMail {
  envelope: { from: string; to: string[] };
  raw: string;
}

export interface SmtpDouble {
  readonly port: number;
  /** smtp://127.0.0.1:<port> */
  readonly url: string;
  readonly messages: ReceivedMail[];
  readonly running: boolean;
  /** Resolves once `count` messages have arrived in total; rejects after `timeoutMs`. */
  waitForMessages(count: number, timeoutMs?: number): Promise<ReceivedMail[]>;
  stop(): Promise<void>;
  start(): Promise<void>;
}

export async function startSmtpDouble(options: { port?: number; rejectRecipients?: string[]; deferOnce?: (subject: string) => boolean } = {}): Promise<SmtpDouble> {
  const messages: ReceivedMail[] = [];
  let deferred = false;
  const waiters: { count: number; resolve: () => void }[] = [];
  const rejected = new Set((options.rejectRecipients ?? []).map((r) => r.toLowerCase()));
  let server: SMTPServer | null = null;
  let port = options.port ?? 0;

  const notify = () => {
    for (const waiter of [...waiters]) {
      if (messages.length >= waiter.count) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve();
      }
    }
  };

  const create = () =>
    new SMTPServer({
      authOptional: true,
      disabledCommands: ['STARTTLS', 'AUTH'],
      logger: false,
      size: 5 * 1024 * 1024,
      onRcptTo(address, _session, callback) {
        if (rejected.has(address.address.toLowerCase())) {
          const error = new Error('Mailbox unavailable') as Error & { responseCode: number };
          error.responseCode = 550;
          callback(error);
          return;
        }
        callback();
      },
      onData(stream, session, callback) {
        const chunks: Buffer[] = [];
        stream.on('data', (chunk: Buffer) => chunks.push(chunk));
        stream.on('end', () => {
          const raw = Buffer.concat(chunks).toString('utf8');
          const from = session.envelope.mailFrom ? session.envelope.mailFrom.address : '';
          const parsed = parseMail(raw);
          if (!deferred && options.deferOnce?.(parsed.subject)) {
            deferred = true;
            const error = new Error('Requested action aborted: try again later') as Error & { responseCode: number };
            error.responseCode = 451;
            callback(error);
            return;
          }
          messages.push({ ...parsed, raw, envelope: { from, to: session.envelope.rcptTo.map((r) => r.address) } });
          callback();
          notify();
        });
      },
    });

  const double: SmtpDouble = {
    get port() {
      return port;
    },
    get url() {
      return `smtp://127.0.0.1:${port}`;
    },
    messages,
    get running() {
      return server !== null;
    },
    waitForMessages(count, timeoutMs = 10_000) {
      if (messages.length >= count) return Promise.resolve(messages);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`only ${messages.length} of ${count} messages arrived within ${timeoutMs} ms`)), timeoutMs);
        waiters.push({
          count,
          resolve: () => {
            clearTimeout(timer);
            resolve(messages);
          },
        });
      });
    },
    async start() {
      if (server) return;
      const next = create();
      await new Promise<void>((resolve, reject) => {
        next.once('error', reject);
        next.listen(port, '127.0.0.1', () => {
          next.off('error', reject);
          resolve();
        });
      });
      port = (next.server.address() as AddressInfo).port;
      server = next;
    },
    async stop() {
      const current = server;
      server = null;
      if (current) await new Promise<void>((resolve) => current.close(() => resolve()));
    },
  };
  await double.start();
  return double;
}
