/**
 * `npm run bench -- webhook-flood`: a correctly signed push while a flood of slow bodies is in
 * flight, against the same push with no flood, on the webhook server as its own process.
 *
 * Phases, interleaved in rotating order every round so each meets the same machine:
 * - quiet: nothing else happens;
 * - unauthenticated flood: FLOOD connections at all times, each announcing 20 MB without any
 *   credential header and trickling 64 KiB every 100 ms; a connection the server closes is opened
 *   again 100 ms later (an attacker keeps trying);
 * - signed flood: the same with a well-formed but wrong X-Hub-Signature-256, so the server has to
 *   read the bodies it admits (within its body budget) before it can refuse them.
 * In each, PUSHES signed pushes of 8 KiB one after the other, each on a new connection (as a git
 * host sends them). Printed per phase: latency p50/p99/max (request start to the end of the answer),
 * the answers, the server's largest resident set sampled every 20 ms (VmRSS) and what the flood got;
 * then the ratios of each flood's latency to the quiet one's, and the server's peak (VmHWM).
 *
 * BENCH_QUICK=1: fewer rounds. WEBHOOK_FLOOD_CONNECTIONS (default 50), WEBHOOK_FLOOD_ROUNDS (6).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { loadTargets } from '../services/shared/targets.js';
import { makeTempDir, repoRoot } from '../services/webhook/test/support/helpers.js';
import { percentile, printTable, ratio } from './stats.js';

const quick = process.env.BENCH_QUICK === '1';
const ROUNDS = Number(process.env.WEBHOOK_FLOOD_ROUNDS ?? (quick ? 2 : 6));
const FLOOD = Number(process.env.WEBHOOK_FLOOD_CONNECTIONS ?? 50);
const PUSHES = quick ? 15 : 30;
const ANNOUNCED = 20 * 1000 * 1000;
const TRICKLE = Buffer.alloc(64 * 1024, 0x20);
const TRICKLE_EVERY_MS = 100;
const REOPEN_AFTER_MS = 100;
const SETTLE_MS = 500;

type Phase = 'quiet' | 'unauthenticated flood' | 'signed flood';
const PHASES: Phase[] = ['quiet', 'unauthenticated flood', 'signed flood'];

/** Current and peak resident memory of a process in MiB (Linux /proc). */
function memoryOf(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const mib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)![1]) / 1024;
  return { rss: mib('VmRSS'), peak: mib('VmHWM') };
}

async function startServer(): Promise<{ child: ChildProcess; port: number; secret: string; dir: string }> {
  const dir = makeTempDir('bench-webhook-flood');
  const targets = loadTargets(join(repoRoot, 'config/targets.yaml'));
  const secrets = Object.fromEntries(targets.map((t) => [t.secret, randomBytes(32).toString('hex')]));
  const deployScript = join(dir, 'deploy-stand-in.sh');
  writeFileSync(deployScript, '#!/bin/sh\nexit 0\n', { mode: 0o755 });
  const child = spawn(process.execPath, ['--import', 'tsx', 'services/webhook/src/server.ts'], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH, ...secrets, WEBHOOK_PORT: '0', WEBHOOK_STATE_DIR: join(dir, 'state'), DEPLOY_ROOT: join(dir, 'sites'), DEPLOY_SCRIPT: deployScript, LOG_LEVEL: 'error' },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    child.on('message', (message: { listening?: number }) => message.listening !== undefined && resolve(message.listening));
    child.once('exit', (code) => reject(new Error(`the webhook server exited with ${code}`)));
  });
  return { child, port, secret: secrets.SECRET_TEAM_DE1!, dir };
}

/** FLOOD slow bodies in flight at all times until stopped; what the server answered them, counted. */
class Flood {
  readonly answers = new Map<string, number>();
  private stopped = false;
  private readonly sockets = new Set<Socket>();
  private readonly timers = new Set<NodeJS.Timeout>();

  constructor(
    private readonly port: number,
    private readonly headers: () => Record<string, string>,
  ) {
    for (let i = 0; i < FLOOD; i++) this.open();
  }

  stop(): void {
    this.stopped = true;
    for (const timer of this.timers) clearTimeout(timer);
    for (const socket of this.sockets) socket.destroy();
  }

  private open(): void {
    if (this.stopped) return;
    const head = ['POST /webhook HTTP/1.1', `Host: 127.0.0.1:${this.port}`, 'Content-Type: application/json', `Content-Length: ${ANNOUNCED}`, 'X-GitHub-Event: push', ...Object.entries(this.headers()).map(([k, v]) => `${k}: ${v}`), '', ''].join('\r\n');
    const socket = connect(this.port, '127.0.0.1');
    this.sockets.add(socket);
    let answer = '';
    let sent = 0;
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => (answer += chunk));
    socket.on('error', () => undefined);
    const trickle = setInterval(() => {
      if (sent + TRICKLE.length >= ANNOUNCED) return;
      socket.write(TRICKLE);
      sent += TRICKLE.length;
    }, TRICKLE_EVERY_MS);
    socket.once('connect', () => socket.write(head));
    socket.once('close', () => {
      clearInterval(trickle);
      this.sockets.delete(socket);
      const status = /^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 'closed';
      if (!this.stopped) this.answers.set(status, (this.answers.get(status) ?? 0) + 1);
      const timer = setTimeout(() => {
        this.timers.delete(timer);
        this.open();
      }, REOPEN_AFTER_MS);
      this.timers.add(timer);
    });
  }

  get inFlight(): number {
    return this.sockets.size;
  }
}

/** One signed 8 KiB push on a new connection; ms from the request to the end of the answer. */
function signedPush(port: number, secret: string): Promise<{ ms: number; status: number }> {
  const skeleton = { ref: 'refs/heads/feature/team-de1/bench', after: randomBytes(20).toString('hex'), padding: '' };
  const body = Buffer.from(JSON.stringify({ ...skeleton, padding: 'x'.repeat(8 * 1024 - JSON.stringify(skeleton).length) }));
  const headers = {
    'content-type': 'application/json',
    'content-length': String(body.length),
    'x-github-event': 'push',
    'x-github-delivery': randomBytes(8).toString('hex'),
    'x-hub-signature-256': `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`,
  };
  return new Promise((resolve) => {
    const started = performance.now();
    const req = request({ host: '127.0.0.1', port, path: '/webhook', method: 'POST', headers, agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve({ ms: performance.now() - started, status: res.statusCode ?? 0 }));
    });
    req.on('error', () => resolve({ ms: performance.now() - started, status: 0 }));
    req.end(body);
  });
}

interface Measured {
  latency: number[];
  statuses: Map<number, number>;
  rssMax: number;
  flood: Map<string, number>;
  inFlight: number[];
}

async function phase(kind: Phase, server: { child: ChildProcess; port: number; secret: string }, into: Measured): Promise<void> {
  const flood =
    kind === 'quiet'
      ? undefined
      : new Flood(server.port, (): Record<string, string> =>
          kind === 'signed flood' ? { 'X-Hub-Signature-256': `sha256=${randomBytes(32).toString('hex')}` } : { 'X-GitHub-Delivery': randomBytes(8).toString('hex') },
        );
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      into.rssMax = Math.max(into.rssMax, memoryOf(server.child.pid!).rss);
      if (flood) into.inFlight.push(flood.inFlight);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  })();
  try {
    await new Promise((resolve) => setTimeout(resolve, SETTLE_MS)); // the flood under way
    for (let i = 0; i < PUSHES; i++) {
      const { ms, status } = await signedPush(server.port, server.secret);
      into.latency.push(ms);
      into.statuses.set(status, (into.statuses.get(status) ?? 0) + 1);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  } finally {
    flood?.stop();
    sampling = false;
    await sampler;
  }
  for (const [status, n] of flood?.answers ?? []) into.flood.set(status, (into.flood.get(status) ?? 0) + n);
  await new Promise((resolve) => setTimeout(resolve, SETTLE_MS)); // what the flood left behind is closed
}

const server = await startServer();
try {
  console.log(`${cpus().length} CPUs, load average ${loadavg().map((l) => l.toFixed(1)).join(' ')}; ${ROUNDS} rounds, ${PUSHES} signed 8 KiB pushes per phase, floods of ${FLOOD} connections announcing 20 MB`);
  const startRss = memoryOf(server.child.pid!).rss;
  for (let i = 0; i < 10; i++) await signedPush(server.port, server.secret); // warm-up
  const all = Object.fromEntries(PHASES.map((p) => [p, { latency: [], statuses: new Map(), rssMax: 0, flood: new Map(), inFlight: [] } as Measured])) as Record<Phase, Measured>;
  for (let round = 0; round < ROUNDS; round++) {
    const order = PHASES.map((_, i) => PHASES[(i + round) % PHASES.length]!);
    for (const kind of order) await phase(kind, server, all[kind]);
  }
  const counts = (m: Map<string | number, number>) => [...m].map(([k, n]) => `${k}×${n}`).join(' ');
  printTable(
    PHASES.map((kind) => {
      const m = all[kind];
      return {
        phase: kind,
        pushes: counts(m.statuses),
        'p50 ms': percentile(m.latency, 50).toFixed(2),
        'p99 ms': percentile(m.latency, 99).toFixed(2),
        'max ms': Math.max(...m.latency).toFixed(2),
        'RSS max MiB': m.rssMax.toFixed(0),
        'flood connections open (median)': m.inFlight.length ? percentile(m.inFlight, 50) : 0,
        'flood answered': counts(m.flood) || '-',
      };
    }),
  );
  const quiet = all.quiet.latency;
  for (const kind of ['unauthenticated flood', 'signed flood'] as const) {
    const l = all[kind].latency;
    console.log(`${kind} against quiet: p50 ${ratio(percentile(l, 50), percentile(quiet, 50))}, p99 ${ratio(percentile(l, 99), percentile(quiet, 99))}; RSS max ${all[kind].rssMax.toFixed(0)} MiB (quiet ${all.quiet.rssMax.toFixed(0)} MiB)`);
  }
  console.log(`server RSS after start ${startRss.toFixed(0)} MiB, peak over the whole run (VmHWM) ${memoryOf(server.child.pid!).peak.toFixed(0)} MiB (target: under 200 MB)`);
  if (PHASES.some((kind) => all[kind].statuses.size !== 1 || !all[kind].statuses.has(202))) throw new Error('a signed push was not acknowledged with 202');
} finally {
  server.child.kill('SIGTERM');
  await new Promise((resolve) => server.child.once('exit', resolve));
  // The server's state, its sites and the deploy stand-in: nothing of a run stays in the temporary folder.
  rmSync(server.dir, { recursive: true, force: true });
}
