/**
 * Webhook benchmarks (`npm run bench -- webhook`).
 *
 * 1. Acknowledgement latency: 200 signed 1 MB push deliveries, 20 at a time, against the webhook
 *    server (its own process) and, as the baseline in the same run, against a bare node:http server
 *    that only reads the body and answers 202; several rounds alternating the two, medians of the
 *    per-round p50/p99, server CPU time per delivery, and 100 deliveries one at a time. Target
 *    p99 ≤ 20 ms (printed, never asserted). The deploy script is a stand-in that takes 2 s like a
 *    (fast) real deploy, so pushes collapse per target as they do in production instead of
 *    spawning one process per delivery.
 * 2. Push to live: a signed push to the server until the fixture site answers with the new
 *    version, via the real deploy script and a file:// repository; cold (empty target directory,
 *    `npm ci`) and with an unchanged lockfile (dependencies reused). Baseline: the bare work of a
 *    deploy (git clone + npm ci + npm run build) run directly. Target ≤ 10 s with an unchanged lockfile.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Agent, createServer, request } from 'node:http';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { createLogger } from '../services/shared/logger.js';
import { loadTargets, type Target } from '../services/shared/targets.js';
import { startWebhookServer } from '../services/webhook/src/boot.js';
import { FixtureRepo, fetchBuild, freePort, makeTempDir, repoRoot, restartFixtureSite, stopFixtureSites } from '../test/webhook/support/helpers.js';
import { median, percentile, printTable, ratio } from './stats.js';

const DELIVERIES = 200;
const CONCURRENCY = 20;
const BODY_BYTES = 1024 * 1024;
const WARMUP = 20;
const ROUNDS = Number(process.env.WEBHOOK_BENCH_ROUNDS ?? 5);
const SEQUENTIAL = 100;

const seedTargets = (): Target[] => loadTargets(join(repoRoot, 'config/targets.yaml'));
const secretOf = (t: Target): string => createHmac('sha256', 'bench').update(t.secret).digest('hex');

// --- child mode: `webhook.bench.ts --serve webhook|baseline <dir>` prints its port and serves -------
if (process.argv[2] === '--serve') {
  const kind = process.argv[3];
  const dir = process.argv[4]!;
  if (kind === 'baseline') {
    const server = createServer((req, res) => {
      req.on('data', () => undefined);
      req.on('end', () => res.writeHead(202, { 'content-type': 'application/json' }).end('{"status":"queued"}'));
    });
    server.listen(0, '127.0.0.1', () => console.log(`PORT ${(server.address() as { port: number }).port}`));
  } else {
    const targets = seedTargets();
    writeFileSync(join(dir, 'targets.yaml'), stringify({ targets }));
    writeFileSync(join(dir, 'deploy-stand-in.sh'), '#!/bin/sh\nsleep 2\n', { mode: 0o755 });
    const running = await startWebhookServer({
      logger: createLogger('webhook', { level: 'warn' }),
      secrets: Object.fromEntries(targets.map((t) => [t.secret, secretOf(t)])),
      env: {
        ...process.env,
        WEBHOOK_PORT: '0',
        TARGETS_FILE: join(dir, 'targets.yaml'),
        DEPLOY_ROOT: join(dir, 'sites'),
        DEPLOY_SCRIPT: join(dir, 'deploy-stand-in.sh'),
        WEBHOOK_STATE_DIR: join(dir, 'state'),
      },
    });
    console.log(`PORT ${running.port}`);
    process.once('SIGTERM', () => void running.close().then(() => process.exit(0)));
  }
} else {
  await main();
}

function startServerProcess(kind: 'webhook' | 'baseline', dir: string): Promise<{ child: ChildProcess; port: number }> {
  // WEBHOOK_BENCH_CPU_PROF=<dir>: a V8 CPU profile of each server process, to see where the time goes.
  const profile = process.env.WEBHOOK_BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.WEBHOOK_BENCH_CPU_PROF}`] : [];
  const child = spawn(process.execPath, [...profile, '--import', 'tsx', new URL(import.meta.url).pathname, '--serve', kind, dir], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const match = /PORT (\d+)/.exec(out);
      if (match) resolve({ child, port: Number(match[1]) });
    });
    child.once('exit', (code) => reject(new Error(`${kind} server exited with ${code}`)));
  });
}

interface Delivery {
  body: Buffer;
  headers: Record<string, string>;
}

/** 1 MB pushes for every target, signed the way each provider signs, each with its own delivery id. */
function makeDeliveries(count: number): Delivery[] {
  const targets = seedTargets();
  return Array.from({ length: count }, (_, i) => {
    const target = targets[i % targets.length]!;
    const branch = target.matchPattern === 'exact' ? target.key : `${target.key}/bench`;
    const skeleton = JSON.stringify({ ref: `refs/heads/${branch}`, after: randomBytes(20).toString('hex'), padding: '' });
    const padding = 'x'.repeat(BODY_BYTES - skeleton.length);
    const body = Buffer.from(skeleton.replace('"padding":""', `"padding":"${padding}"`));
    const secret = secretOf(target);
    const headers: Record<string, string> =
      target.provider === 'gitlab'
        ? { 'x-gitlab-event': 'Push Hook', 'x-gitlab-token': secret, 'idempotency-key': randomBytes(8).toString('hex') }
        : {
            'x-github-event': 'push',
            'x-github-delivery': randomBytes(8).toString('hex'),
            'x-hub-signature-256': `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`,
          };
    return { body, headers: { 'content-type': 'application/json', ...headers } };
  });
}

/**
 * One delivery. `totalMs`: request start → response complete (includes pushing 1 MB through the
 * loopback, which the baseline pays too). `ackMs`: last body byte handed to the socket → response
 * headers, i.e. how long the server takes to acknowledge a delivery it has (nearly) received.
 */
function post(agent: Agent, port: number, delivery: Delivery): Promise<{ totalMs: number; ackMs: number; status: number }> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    let bodySent = started;
    let answered = started;
    const req = request(
      { host: '127.0.0.1', port, path: '/webhook', method: 'POST', agent, headers: { ...delivery.headers, 'content-length': String(delivery.body.length) } },
      (res) => {
        answered = process.hrtime.bigint();
        res.resume();
        res.on('end', () =>
          resolve({
            totalMs: Number(process.hrtime.bigint() - started) / 1e6,
            ackMs: Number(answered - (bodySent > answered ? answered : bodySent)) / 1e6,
            status: res.statusCode ?? 0,
          }),
        );
      },
    );
    req.on('finish', () => (bodySent = process.hrtime.bigint()));
    req.on('error', reject);
    req.end(delivery.body);
  });
}

/** CPU time (user + system) a process has used so far, in ms (Linux /proc; clock ticks of 10 ms). */
function cpuMsOf(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10; // utime, stime (fields 14 and 15 of stat)
}

interface LoadResult {
  total: number[];
  ack: number[];
  statuses: Map<number, number>;
  seconds: number;
}

async function load(port: number, deliveries: readonly Delivery[], concurrency = CONCURRENCY): Promise<LoadResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
  const result: LoadResult = { total: [], ack: [], statuses: new Map(), seconds: 0 };
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < deliveries.length) {
        const { totalMs, ackMs, status } = await post(agent, port, deliveries[next++]!);
        result.total.push(totalMs);
        result.ack.push(ackMs);
        result.statuses.set(status, (result.statuses.get(status) ?? 0) + 1);
      }
    }),
  );
  result.seconds = (performance.now() - started) / 1000;
  agent.destroy();
  return result;
}

/**
 * Both servers run side by side for the whole measurement; each round measures the baseline and
 * the webhook server back to back (alternating which goes first), after a concurrent warm-up of
 * each, so load from elsewhere on the machine colours both alike. Reported: per-round p50/p99,
 * their medians over the rounds, and ratios webhook/baseline.
 */
async function acknowledgementLatency(): Promise<void> {
  console.log(`\n-- acknowledgement latency: ${DELIVERIES} signed ${BODY_BYTES / 1024 / 1024} MB deliveries, ${CONCURRENCY} concurrent, ${ROUNDS} rounds`);
  console.log(`   (${cpus().length} CPUs, load average ${loadavg().map((l) => l.toFixed(1)).join(' ')})`);
  const dir = makeTempDir('bench-webhook');
  const servers = { baseline: await startServerProcess('baseline', dir), webhook: await startServerProcess('webhook', dir) };
  const kinds = ['baseline', 'webhook'] as const;
  const perRound: Record<(typeof kinds)[number], { p50: number; p99: number; ackP50: number; ackP99: number; rate: number; cpuMs: number }[]> = {
    baseline: [],
    webhook: [],
  };
  const statuses: Record<string, Map<number, number>> = { baseline: new Map(), webhook: new Map() };
  const sequential: Record<string, { p50: number; p99: number }> = {};
  try {
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? kinds : ([...kinds].reverse() as unknown as typeof kinds);
      for (const kind of order) {
        // Fresh delivery ids and commits every round: each one is a genuine new push.
        await load(servers[kind].port, makeDeliveries(WARMUP));
        const deliveries = makeDeliveries(DELIVERIES);
        const cpuBefore = cpuMsOf(servers[kind].child.pid!);
        const r = await load(servers[kind].port, deliveries);
        const cpuMs = (cpuMsOf(servers[kind].child.pid!) - cpuBefore) / DELIVERIES;
        perRound[kind].push({
          p50: median(r.total),
          p99: percentile(r.total, 99),
          ackP50: median(r.ack),
          ackP99: percentile(r.ack, 99),
          rate: r.total.length / r.seconds,
          cpuMs,
        });
        for (const [status, n] of r.statuses) statuses[kind]!.set(status, (statuses[kind]!.get(status) ?? 0) + n);
      }
    }
    // One at a time: the time a delivery takes when nothing queues in front of it.
    for (const kind of kinds) {
      const r = await load(servers[kind].port, makeDeliveries(SEQUENTIAL), 1);
      sequential[kind] = { p50: median(r.total), p99: percentile(r.total, 99) };
    }
  } finally {
    for (const { child } of Object.values(servers)) {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
  }

  const summary = (kind: (typeof kinds)[number]) => {
    const rounds = perRound[kind];
    const of = (field: keyof (typeof rounds)[number]) => median(rounds.map((r) => r[field]));
    return { p50: of('p50'), p99: of('p99'), ackP50: of('ackP50'), ackP99: of('ackP99'), rate: of('rate'), cpuMs: of('cpuMs') };
  };
  const fmt = (ms: number) => +ms.toFixed(2);
  printTable(
    kinds.flatMap((kind) =>
      perRound[kind].map((r, round) => ({
        round: round + 1,
        server: kind,
        total_p50_ms: fmt(r.p50),
        total_p99_ms: fmt(r.p99),
        ack_p50_ms: fmt(r.ackP50),
        ack_p99_ms: fmt(r.ackP99),
        deliveries_per_s: Math.round(r.rate),
        server_cpu_ms_per_delivery: fmt(r.cpuMs),
      })),
    ),
  );
  const base = summary('baseline');
  const hook = summary('webhook');
  printTable(
    kinds.map((kind) => {
      const s = kind === 'baseline' ? base : hook;
      return {
        server: kind === 'baseline' ? 'bare node:http (baseline)' : 'webhook server',
        'median total p50 ms': fmt(s.p50),
        'median total p99 ms': fmt(s.p99),
        'median ack p50 ms': fmt(s.ackP50),
        'median ack p99 ms': fmt(s.ackP99),
        deliveries_per_s: Math.round(s.rate),
        'server CPU ms/delivery': fmt(s.cpuMs),
        statuses: [...statuses[kind]!].map(([status, n]) => `${status}×${n}`).join(' '),
      };
    }),
  );
  console.log(
    `webhook/baseline — total p50 ${ratio(hook.p50, base.p50)}, total p99 ${ratio(hook.p99, base.p99)}, ` +
      `ack p50 ${ratio(hook.ackP50, base.ackP50)}, ack p99 ${ratio(hook.ackP99, base.ackP99)}, throughput ${ratio(hook.rate, base.rate)}, server CPU per delivery ${ratio(hook.cpuMs, base.cpuMs)}`,
  );
  const [seqBase, seqHook] = [sequential.baseline!, sequential.webhook!];
  console.log(
    `one at a time (${SEQUENTIAL} deliveries): baseline p50 ${seqBase.p50.toFixed(2)} / p99 ${seqBase.p99.toFixed(2)} ms, ` +
      `webhook p50 ${seqHook.p50.toFixed(2)} / p99 ${seqHook.p99.toFixed(2)} ms (ratio p50 ${ratio(seqHook.p50, seqBase.p50)}, p99 ${ratio(seqHook.p99, seqBase.p99)})`,
  );
  console.log(`webhook total p99 ${hook.p99.toFixed(2)} ms, ack p99 ${hook.ackP99.toFixed(2)} ms against the 20 ms target (baseline: ${base.p99.toFixed(2)} / ${base.ackP99.toFixed(2)} ms)`);
}

async function pushToLive(): Promise<void> {
  console.log('\n-- push to live: fixture site, real deploy script, file:// repository');
  const root = makeTempDir('bench-deploy');
  try {
    const repo = new FixtureRepo(join(root, 'repo'));
    const targets = seedTargets();
    const ports = new Map<string, number>();
    for (const t of targets) ports.set(t.key, await freePort());
    const benchTargets = targets.map((t) => ({ ...t, port: ports.get(t.key)!, repo: repo.url }));
    writeFileSync(join(root, 'targets.yaml'), stringify({ targets: benchTargets }));
    mkdirSync(join(root, 'sites'), { recursive: true });
    const server = await startWebhookServer({
      logger: createLogger('webhook', { level: 'warn' }),
      secrets: Object.fromEntries(targets.map((t) => [t.secret, secretOf(t)])),
      env: {
        ...process.env,
        WEBHOOK_PORT: '0',
        TARGETS_FILE: join(root, 'targets.yaml'),
        DEPLOY_ROOT: join(root, 'sites'),
        WEBHOOK_STATE_DIR: join(root, 'state'),
        RESTART_COMMAND: restartFixtureSite,
        npm_config_cache: join(root, 'npm-cache'),
      },
    });
    const pushAndWait = async (target: Target, version: string): Promise<number> => {
      const branch = target.matchPattern === 'exact' ? target.key : `${target.key}/bench`;
      const commit = repo.commit(branch, { VERSION: `${version}\n` });
      const body = JSON.stringify({ ref: `refs/heads/${branch}`, after: commit });
      const headers: Record<string, string> =
        target.provider === 'gitlab'
          ? { 'x-gitlab-event': 'Push Hook', 'x-gitlab-token': secretOf(target) }
          : { 'x-github-event': 'push', 'x-hub-signature-256': `sha256=${createHmac('sha256', secretOf(target)).update(body).digest('hex')}` };
      const started = performance.now();
      const res = await fetch(`${server.url}/webhook`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
      if (res.status !== 202) throw new Error(`push answered ${res.status}`);
      for (;;) {
        const live = await fetchBuild(ports.get(target.key)!).catch(() => null);
        if (live?.version === version) return performance.now() - started;
        if (performance.now() - started > 120_000) throw new Error('deploy did not go live within 120 s');
        await new Promise((r) => setTimeout(r, 20));
      }
    };

    // Cold: the first deploy of each target (empty directory, npm ci).
    const cold: number[] = [];
    for (const target of benchTargets.slice(0, 3)) cold.push(await pushAndWait(target, `cold-${target.deployPath}`));
    // Unchanged lockfile: further deploys of main, dependencies reused from the live release.
    const warm: number[] = [];
    for (let i = 0; i < 5; i++) warm.push(await pushAndWait(benchTargets[0]!, `warm-${i}`));
    await server.close();

    // Baseline: the same work without the pipeline (no webhook, lock, switch, restart or check).
    const bare: number[] = [];
    for (let i = 0; i < 3; i++) {
      const dir = join(root, `bare-${i}`);
      const started = performance.now();
      const env = { ...process.env, npm_config_cache: join(root, 'npm-cache'), PORT: '1' };
      spawnSync('git', ['clone', '--quiet', '--depth', '1', '--branch', 'main', repo.url, dir], { env });
      spawnSync('npm', ['ci', '--prefer-offline', '--no-audit', '--no-fund'], { cwd: dir, env, stdio: 'ignore' });
      spawnSync('npm', ['run', 'build'], { cwd: dir, env, stdio: 'ignore' });
      bare.push(performance.now() - started);
    }

    printTable([
      { case: 'bare clone + npm ci + build (baseline)', runs: bare.length, median_s: +(median(bare) / 1000).toFixed(2), max_s: +(Math.max(...bare) / 1000).toFixed(2) },
      { case: 'push → live, cold (npm ci)', runs: cold.length, median_s: +(median(cold) / 1000).toFixed(2), max_s: +(Math.max(...cold) / 1000).toFixed(2) },
      { case: 'push → live, unchanged lockfile', runs: warm.length, median_s: +(median(warm) / 1000).toFixed(2), max_s: +(Math.max(...warm) / 1000).toFixed(2) },
    ]);
    console.log(`unchanged lockfile / cold: ${ratio(median(warm), median(cold))}; cold / baseline: ${ratio(median(cold), median(bare))}; unchanged / baseline: ${ratio(median(warm), median(bare))}`);
    console.log(`unchanged-lockfile push-to-live ${(Math.max(...warm) / 1000).toFixed(2)} s (max) against the 10 s target: ${Math.max(...warm) <= 10_000 ? 'met' : 'NOT met'}`);
  } finally {
    stopFixtureSites(root);
  }
}

/** WEBHOOK_BENCH_ONLY=ack or =deploy runs one of the two parts. */
async function main(): Promise<void> {
  const only = process.env.WEBHOOK_BENCH_ONLY;
  if (only !== 'deploy') await acknowledgementLatency();
  if (only !== 'ack') await pushToLive();
}
