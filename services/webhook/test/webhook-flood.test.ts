/**
 * Floods of slow bodies, as one client with a loopback's bandwidth can send them: 50 connections each
 * announcing 20 MB, sending all but the last KiB as fast as the server reads it, then trickling a byte
 * every 200 ms and never finishing. Without any credential header each is refused with 401 before
 * its body is read and its connection closed; with a well-formed but wrong signature (which can only
 * be checked against the whole body) the global body budget admits what fits and refuses the rest
 * with 503 and Retry-After. Either way the server stays under 200 MB of resident memory (measured
 * from /proc on the server, its own process as deployed) and a correctly signed push is deployed
 * meanwhile. Also: the connection cap refuses the connection after the last allowed one, the
 * request timeout ends a body that never finishes and gives its budget back, chunked and compressed
 * bodies pay for what arrives, and a budget too small for one body at the size limit stops the start.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { gzipSync } from 'node:zlib';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { waitFor } from './support/helpers.js';
import { startWebhookProcess, type ServerProcess } from './support/server-process.js';
import { githubSignature, pushPayload, sendGithub, startHarness, type Harness } from './support/webhook-harness.js';

const ATTACKERS = 50;
const ANNOUNCED = 20 * 1000 * 1000;
const HELD_BACK = 1024;
const RSS_LIMIT = 200 * 1000 * 1000;
const PIECE = Buffer.alloc(256 * 1024, 0x20);
/** A legitimate push as large as an attacker's body (GitHub's limit is 25 MB). */
const LARGE_PADDING = 20 * 2 ** 20;
const MiB = (bytes: number): string => `${(bytes / 2 ** 20).toFixed(0)} MiB`;

/** Peak and current resident memory of a process, in bytes (Linux /proc). */
function memoryOf(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)![1]) * 1024;
  return { rss: kib('VmRSS'), peak: kib('VmHWM') };
}

const processes: ServerProcess[] = [];
const attackers: SlowBody[] = [];
const harnesses: Harness[] = [];
afterEach(() => {
  for (const attacker of attackers.splice(0)) attacker.stop();
});
afterAll(async () => {
  for (const { child } of processes) {
    if (child.exitCode !== null) continue;
    child.kill('SIGTERM');
    await new Promise((resolve) => child.once('exit', resolve));
  }
  for (const h of harnesses) await h.close();
});

/** The server as its own process (support/server-process.ts), stopped after the file. */
async function startServerProcess(env: Record<string, string> = {}): Promise<ServerProcess> {
  const started = await startWebhookProcess('webhook-flood', env);
  processes.push(started);
  return started;
}

/**
 * One slow body: the request head with a Content-Length of `announced`, then the body in 256 KiB
 * pieces as fast as the server takes them (socket back-pressure) up to HELD_BACK bytes short of it,
 * then one byte every 200 ms; it never finishes. Whatever the server answers is kept.
 */
class SlowBody {
  readonly socket: Socket;
  sent = 0;
  answer = '';
  state: 'sending' | 'holding' | 'closed' = 'sending';
  readonly closed: Promise<void>;
  private trickle: NodeJS.Timeout | undefined;

  constructor(port: number, headers: Record<string, string>, readonly announced = ANNOUNCED) {
    const head = ['POST /webhook HTTP/1.1', `Host: 127.0.0.1:${port}`, 'Content-Type: application/json', `Content-Length: ${announced}`, ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`), '', ''].join('\r\n');
    this.socket = connect(port, '127.0.0.1');
    this.socket.setEncoding('latin1');
    this.socket.on('data', (chunk: string) => (this.answer += chunk));
    this.socket.on('error', () => undefined); // EPIPE / ECONNRESET once the server has closed: expected
    this.closed = new Promise((resolve) =>
      this.socket.once('close', () => {
        this.state = 'closed';
        clearInterval(this.trickle);
        resolve();
      }),
    );
    this.socket.once('connect', () => {
      this.socket.write(head);
      void this.pump();
    });
  }

  get status(): number {
    return Number(/^HTTP\/1\.1 (\d{3})/.exec(this.answer)?.[1] ?? 0);
  }

  header(name: string): string | undefined {
    return new RegExp(`^${name}: *([^\\r]*)`, 'im').exec(this.answer)?.[1];
  }

  stop(): void {
    clearInterval(this.trickle);
    this.socket.destroy();
  }

  private async pump(): Promise<void> {
    const bulk = this.announced - HELD_BACK;
    while (this.state === 'sending' && this.sent < bulk) {
      const piece = PIECE.subarray(0, Math.min(PIECE.length, bulk - this.sent));
      this.sent += piece.length;
      if (!this.socket.write(piece)) await this.drained();
    }
    if (this.state !== 'sending') return;
    this.state = 'holding';
    this.trickle = setInterval(() => {
      if (this.sent >= this.announced - 1) return; // never the last byte
      this.socket.write(' ');
      this.sent++;
    }, 200);
  }

  private drained(): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        this.socket.off('drain', done);
        this.socket.off('close', done);
        resolve();
      };
      this.socket.on('drain', done);
      this.socket.on('close', done);
    });
  }
}

/**
 * Starts `count` slow bodies and waits until each is holding or closed (at most 15 s), sampling the
 * server's memory meanwhile; stops early once it is far past the limit (today's code buffers them all).
 */
async function flood(server: ServerProcess, headers: () => Record<string, string>, count = ATTACKERS): Promise<SlowBody[]> {
  const started = Array.from({ length: count }, () => new SlowBody(server.port, headers()));
  attackers.push(...started);
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline && started.some((a) => a.state === 'sending') && memoryOf(server.child.pid!).rss < 2 * RSS_LIMIT) {
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  // Let the answers to the last ones arrive.
  await new Promise((resolve) => setTimeout(resolve, 200));
  return started;
}

function summary(bodies: SlowBody[]): string {
  const counts = new Map<string, number>();
  for (const b of bodies) {
    const key = `${b.status || 'no answer'}/${b.state}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return [...counts].map(([k, n]) => `${k}×${n}`).join(' ');
}

type Answer = { status: number; retryAfter: string | null };

/**
 * A request over a plain socket, written by `send`, answered once the server closes (Connection:
 * close). The server may answer before it has read the body and then closes; a client still writing
 * then gets a reset, and with it Node drops what had arrived. So `send` pauses where an answer may
 * come before the rest (as a client sending Expect: 100-continue would) and stops if one has.
 */
function exchange(port: number, send: (write: (data: string | Buffer) => void, answered: (withinMs: number) => Promise<boolean>) => Promise<void>): Promise<Answer> {
  return new Promise((resolve) => {
    let answer = '';
    let closed = false;
    const socket = connect(port, '127.0.0.1', () => {
      const answered = async (withinMs: number): Promise<boolean> => {
        const until = Date.now() + withinMs;
        while (!answer && !closed && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
        return answer !== '' || closed;
      };
      void send((data) => void (closed || socket.write(data)), answered);
    });
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => (answer += chunk));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      closed = true;
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0), retryAfter: /^retry-after: *(\d+)/im.exec(answer)?.[1] ?? null });
    });
  });
}

const requestHead = (port: number, headers: Record<string, string>): string =>
  ['POST /webhook HTTP/1.1', `Host: 127.0.0.1:${port}`, 'Content-Type: application/json', 'Connection: close', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`), '', ''].join('\r\n');

/** With a Content-Length: the head, then (unless answered on the head alone) the body. */
function rawPost(port: number, body: Buffer, headers: Record<string, string>): Promise<Answer> {
  return exchange(port, async (write, answered) => {
    write(requestHead(port, { ...headers, 'Content-Length': String(body.length) }));
    if (!(await answered(100))) write(body);
  });
}

/**
 * Chunked (no Content-Length), in pieces of 64 KiB: the first `pauseAfter` bytes, then (unless
 * answered meanwhile) the rest and the last chunk.
 */
function chunkedPost(port: number, body: Buffer, headers: Record<string, string>, pauseAfter = body.length): Promise<Answer> {
  const piece = (from: number, to: number): Buffer[] => {
    const out: Buffer[] = [];
    for (let i = from; i < to; i += 64 * 1024) {
      const data = body.subarray(i, Math.min(i + 64 * 1024, to));
      out.push(Buffer.from(`${data.length.toString(16)}\r\n`), data, Buffer.from('\r\n'));
    }
    return out;
  };
  return exchange(port, async (write, answered) => {
    write(requestHead(port, { ...headers, 'Transfer-Encoding': 'chunked' }));
    for (const data of piece(0, pauseAfter)) write(data);
    if (pauseAfter < body.length && (await answered(500))) return;
    for (const data of piece(pauseAfter, body.length)) write(data);
    write('0\r\n\r\n');
  });
}

/** A correctly signed push of `branch` for team de1 (over a plain socket), and its commit. */
async function legitimatePush(port: number, secret: string, branch: string, extra: Record<string, unknown> = {}): Promise<{ status: number; retryAfter: string | null; commit: string }> {
  const commit = randomBytes(20).toString('hex');
  const body = Buffer.from(JSON.stringify(pushPayload(branch, commit, extra)));
  const answer = await rawPost(port, body, { 'X-GitHub-Event': 'push', 'X-GitHub-Delivery': randomBytes(8).toString('hex'), 'X-Hub-Signature-256': githubSignature(body, secret) });
  return { ...answer, commit };
}

async function deployed(server: ServerProcess, commit: string): Promise<boolean> {
  return waitFor(() => existsSync(server.recordFile) && readFileSync(server.recordFile, 'utf8').includes(commit), 10_000, `the deploy of ${commit}`);
}

describe('50 slow 20 MB bodies', () => {
  it('without a credential header: each gets 401 before its body is read and is closed; the server stays under 200 MB and a signed push deploys meanwhile', async () => {
    const server = await startServerProcess();
    const before = memoryOf(server.child.pid!);
    const bodies = await flood(server, () => ({ 'X-GitHub-Event': 'push', 'X-GitHub-Delivery': randomBytes(8).toString('hex') }));
    const push = await legitimatePush(server.port, server.secrets.SECRET_TEAM_DE1!, 'feature/team-de1/during-flood');
    const after = memoryOf(server.child.pid!);
    console.log(`unauthenticated flood: RSS ${MiB(before.rss)} before, peak ${MiB(after.peak)}; ${summary(bodies)}; at most ${MiB(Math.max(...bodies.map((b) => b.sent)))} sent by one; signed push ${push.status}`);
    expect(after.peak).toBeLessThan(RSS_LIMIT);
    await Promise.all(bodies.map((b) => b.closed)); // the server closed every one of them
    // The 401 is written before the close; a sender still writing may get the reset first and lose
    // it (the server does not linger reading a body it refused), so not every one sees it.
    expect(bodies.every((b) => b.status === 401 || b.status === 0)).toBe(true);
    expect(bodies.some((b) => b.status === 401)).toBe(true);
    // What they got out before the close is what the socket buffers took, not their bodies.
    expect(Math.max(...bodies.map((b) => b.sent))).toBeLessThan(ANNOUNCED / 4);
    expect(push.status).toBe(202);
    expect(await deployed(server, push.commit)).toBe(true);
  }, 60_000);

  it('with a well-formed but wrong signature: the body budget admits what fits and answers 503 with Retry-After to the rest; under 200 MB, and a signed push deploys meanwhile and once the budget is free again', async () => {
    const server = await startServerProcess();
    const before = memoryOf(server.child.pid!);
    const bodies = await flood(server, () => ({ 'X-GitHub-Event': 'push', 'X-Hub-Signature-256': `sha256=${randomBytes(32).toString('hex')}` }));
    const holding = bodies.filter((b) => b.state === 'holding');
    const refused = bodies.filter((b) => b.state === 'closed');
    // A typical push (a few KiB) still finds room: the last quarter of the budget is kept for small bodies.
    const small = await legitimatePush(server.port, server.secrets.SECRET_TEAM_DE1!, 'feature/team-de1/during-flood');
    // A large one (20 MiB) does not while the flood holds the budget for large bodies: 503 with
    // Retry-After, nothing read.
    const large = await legitimatePush(server.port, server.secrets.SECRET_TEAM_DE1!, 'feature/team-de1/large-during-flood', { padding: 'x'.repeat(LARGE_PADDING) });
    const after = memoryOf(server.child.pid!);
    console.log(`signed flood: RSS ${MiB(before.rss)} before, peak ${MiB(after.peak)}; ${summary(bodies)}; small push ${small.status}, large push ${large.status} (Retry-After ${large.retryAfter})`);
    expect(after.peak).toBeLessThan(RSS_LIMIT);
    // Admitted while they fit in the share of large bodies (36 MiB of the default 48 MiB) and held;
    // every other one refused on its head and closed. The 503 is written before the close; one
    // still writing may get the reset first and lose it.
    expect(holding.length).toBeGreaterThan(0);
    expect(holding.length * ANNOUNCED).toBeLessThanOrEqual(36 * 2 ** 20);
    expect(holding.length + refused.length).toBe(ATTACKERS);
    expect(refused.every((b) => b.status === 503 || b.status === 0)).toBe(true);
    const answered = refused.filter((b) => b.status === 503);
    expect(answered.length).toBeGreaterThan(0);
    expect(answered.every((b) => Number(b.header('retry-after')) > 0)).toBe(true);
    expect(small.status).toBe(202);
    expect(await deployed(server, small.commit)).toBe(true);
    expect(large.status).toBe(503);
    expect(Number(large.retryAfter)).toBeGreaterThan(0);

    // The flood ends (here: it gives up; else the request timeout ends it): the retried push goes through.
    for (const b of bodies) b.stop();
    const retried = await waitFor(
      async () => {
        const answer = await legitimatePush(server.port, server.secrets.SECRET_TEAM_DE1!, 'feature/team-de1/large-after-flood', { padding: 'x'.repeat(LARGE_PADDING) });
        return answer.status === 503 ? undefined : answer;
      },
      5_000,
      'the body budget to be given back',
    );
    expect(retried.status).toBe(202);
    expect(await deployed(server, retried.commit)).toBe(true);
    expect(memoryOf(server.child.pid!).peak).toBeLessThan(RSS_LIMIT);
  }, 60_000);
});

describe('connections and time', () => {
  it('the connection cap refuses the connection after the last allowed one while the others are held; a push gets through once one is free', async () => {
    const h = await startHarness({ env: { WEBHOOK_MAX_CONNECTIONS: '8' } });
    harnesses.push(h);
    const port = Number(new URL(h.url).port);
    // Eight connections that send a request head and then hold on.
    const held = Array.from({ length: 8 }, () => new SlowBody(port, { 'X-GitHub-Event': 'push', 'X-Hub-Signature-256': `sha256=${'1'.repeat(64)}` }, 1_000_000));
    attackers.push(...held);
    await waitFor(() => held.every((b) => b.state === 'holding'), 5_000, 'eight connections to be held');
    const ninth = new SlowBody(port, { 'X-GitHub-Event': 'push' }, 10);
    attackers.push(ninth);
    await Promise.race([ninth.closed, new Promise((resolve) => setTimeout(resolve, 2_000))]);
    expect(ninth.state).toBe('closed');
    expect(ninth.answer).toBe(''); // refused as a connection, not answered as a request
    expect(held.every((b) => b.state === 'holding')).toBe(true);

    held[0]!.stop();
    const push = await waitFor(
      async () => {
        try {
          return await sendGithub(h.url, pushPayload('feature/team-de1/after-cap'), h.secrets.SECRET_TEAM_DE1!);
        } catch {
          return undefined; // the server had not yet counted the freed connection
        }
      },
      5_000,
      'a connection to be accepted',
    );
    expect(push.status).toBe(202);
  });

  it('a body that never finishes is ended by the request timeout, and its share of the body budget is given back', async () => {
    const h = await startHarness({ env: { WEBHOOK_REQUEST_TIMEOUT_SECONDS: '1', WEBHOOK_BODY_BUDGET_BYTES: String(4 * 2 ** 20), WEBHOOK_MAX_BODY_BYTES: String(3 * 2 ** 20) } });
    harnesses.push(h);
    const port = Number(new URL(h.url).port);
    const slow = new SlowBody(port, { 'X-GitHub-Event': 'push', 'X-Hub-Signature-256': `sha256=${'2'.repeat(64)}` }, 3 * 2 ** 20 - 1024);
    attackers.push(slow);
    await waitFor(() => slow.state === 'holding', 5_000, 'the slow body to be held');
    const large = () => legitimatePush(port, h.secrets.SECRET_TEAM_DE1!, 'feature/team-de1/large', { padding: 'x'.repeat(2 * 2 ** 20) });
    expect((await large()).status).toBe(503); // the slow body holds the budget for large bodies
    const started = Date.now();
    await Promise.race([slow.closed, new Promise((resolve) => setTimeout(resolve, 5_000))]);
    expect(slow.state).toBe('closed');
    expect(Date.now() - started).toBeLessThan(4_000);
    expect((await large()).status).toBe(202);
  });

  it('a chunked or compressed body pays for what arrives: past the budget it gets 503 with Retry-After and is closed, and the budget is whole again afterwards', async () => {
    const h = await startHarness({ env: { WEBHOOK_BODY_BUDGET_BYTES: String(4 * 2 ** 20), WEBHOOK_MAX_BODY_BYTES: String(3 * 2 ** 20) } });
    harnesses.push(h);
    const port = Number(new URL(h.url).port);
    // A slow body holds 2 MiB of the 3 MiB that bodies over 1 MiB (and chunked ones) may use.
    const slow = new SlowBody(port, { 'X-GitHub-Event': 'push', 'X-Hub-Signature-256': `sha256=${'3'.repeat(64)}` }, 2 * 2 ** 20);
    attackers.push(slow);
    await waitFor(() => slow.state === 'holding', 5_000, 'the slow body to be held');
    const payload = Buffer.from(JSON.stringify(pushPayload('feature/team-de1/chunked', undefined, { padding: 'x'.repeat(1.5 * 2 ** 20) })));
    const signed = { 'x-github-event': 'push', 'x-hub-signature-256': githubSignature(payload, h.secrets.SECRET_TEAM_DE1!) };
    // 1 MiB is left: the chunk past it is refused (the sender pauses there, to read the answer).
    const chunked = await chunkedPost(port, payload, signed, 2 ** 20 + 64 * 1024);
    expect(chunked.status).toBe(503);
    expect(Number(chunked.retryAfter)).toBeGreaterThan(0);
    const gzipped = await rawPost(port, gzipSync(payload), { ...signed, 'content-encoding': 'gzip' });
    expect(gzipped.status).toBe(503);
    slow.stop();
    await waitFor(async () => (await chunkedPost(port, payload, signed, 2 ** 20 + 64 * 1024)).status === 202, 5_000, 'the chunked push to be accepted once the budget is free');
  });

  it('refuses to start with a body budget too small for a body at the size limit beside the quarter kept for small bodies, naming the variable', async () => {
    await expect(startHarness({ env: { WEBHOOK_BODY_BUDGET_BYTES: String(32 * 2 ** 20) } })).rejects.toThrow(/WEBHOOK_BODY_BUDGET_BYTES: .*at least 34952534/);
  });

  it('a request without a credential header gets its 401 before it has sent any of its body', async () => {
    const h = await startHarness();
    harnesses.push(h);
    const port = Number(new URL(h.url).port);
    // Only the head goes out; the body (the whole announced 20 MB) is never sent.
    const socket = connect(port, '127.0.0.1');
    let answer = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => (answer += chunk));
    socket.on('error', () => undefined);
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.write(['POST /webhook HTTP/1.1', 'Host: x', 'Content-Type: application/json', `Content-Length: ${ANNOUNCED}`, 'X-GitHub-Event: push', '', ''].join('\r\n'));
    const answered = await Promise.race([closed.then(() => true), new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 2_000))]);
    socket.destroy();
    expect(answered).toBe(true); // answered and closed by the server
    expect(answer).toMatch(/^HTTP\/1\.1 401 /);
    expect(answer).toMatch(/^connection: close/im);
  });
});
