/**
 * Webhook benchmarks (`npm run bench -- webhook`).
 *
 * 1. Acknowledgement latency: 200 signed 1 MB push deliveries, 20 at a time, against the webhook
 *    server (its own process) and, as the baseline in the same run, against a bare node:http server
 *    that only reads the body and answers 202. Target p99 ≤ 20 ms. The deploy script is a stand-in
 *    that takes 2 s like a (fast) real deploy, so pushes collapse per target as they do in
 *    production instead of spawning one process per delivery.
 * 2. Push to live: a signed push to the server until the fixture site answers with the new
 *    version, via the real deploy script and a file:// repository; cold (empty target directory,
 *    `npm ci`) and with an unchanged lockfile (dependencies reused). Baseline: the bare work of a
 *    deploy (git clone + npm ci + npm run build) run directly. Target ≤ 10 s with an unchanged lockfile.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { Agent, createServer, request } from 'node:http';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { createLogger } from '../services/shared/logger.js';
import { loadTargets, type Target } from '../services/shared/targets.js';
import { startWebhookServer } from '../services/webhook/src/server.js';
import { FixtureRepo, fetchBuild, freePort, makeTempDir, repoRoot, restartFixtureSite, stopFixtureSites } from '../test/webhook/support/helpers.js';
import { median, percentile, printTable, ratio } from './stats.js';

const DELIVERIES = 200;
const CONCURRENCY = 20;
const BODY_BYTES = 1024 * 1024;
const WARMUP = 20;

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
  const child = spawn(process.execPath, ['--import', 'tsx', new URL(import.meta.url).pathname, '--serve', kind, dir], {
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

/** 1 MB pushes for every target, signed the way each provider signs. */
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

function post(agent: Agent, port: number, delivery: Delivery): Promise<{ ms: number; status: number }> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const req = request(
      { host: '127.0.0.1', port, path: '/webhook', method: 'POST', agent, headers: { ...delivery.headers, 'content-length': String(delivery.body.length) } },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ ms: Number(process.hrtime.bigint() - started) / 1e6, status: res.statusCode ?? 0 }));
      },
    );
    req.on('error', reject);
    req.end(delivery.body);
  });
}

async function load(port: number, deliveries: Delivery[]): Promise<{ samples: number[]; statuses: Map<number, number>; seconds: number }> {
  const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  for (const d of deliveries.slice(0, WARMUP)) await post(agent, port, d);
  const measured = deliveries.slice(WARMUP);
  const samples: number[] = [];
  const statuses = new Map<number, number>();
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < measured.length) {
        const { ms, status } = await post(agent, port, measured[next++]!);
        samples.push(ms);
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
      }
    }),
  );
  agent.destroy();
  return { samples, statuses, seconds: (performance.now() - started) / 1000 };
}

async function acknowledgementLatency(): Promise<void> {
  console.log(`\n-- acknowledgement latency: ${DELIVERIES} signed ${BODY_BYTES / 1024 / 1024} MB deliveries, ${CONCURRENCY} concurrent`);
  console.log(`   (${cpus().length} CPUs, load average ${loadavg().map((l) => l.toFixed(1)).join(' ')})`);
  const dir = makeTempDir('bench-webhook');
  const deliveries = makeDeliveries(DELIVERIES + WARMUP);
  const rows = [];
  const results: Record<string, number[]> = {};
  for (const kind of ['baseline', 'webhook'] as const) {
    const { child, port } = await startServerProcess(kind, dir);
    try {
      const { samples, statuses, seconds } = await load(port, deliveries);
      results[kind] = samples;
      rows.push({
        server: kind === 'baseline' ? 'bare node:http (baseline)' : 'webhook server',
        p50_ms: +median(samples).toFixed(2),
        p99_ms: +percentile(samples, 99).toFixed(2),
        max_ms: +Math.max(...samples).toFixed(2),
        deliveries_per_s: +(samples.length / seconds).toFixed(0),
        statuses: [...statuses].map(([s, n]) => `${s}×${n}`).join(' '),
      });
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
  }
  printTable(rows);
  const [base, hook] = [results.baseline!, results.webhook!];
  console.log(`p50 ratio webhook/baseline: ${ratio(median(hook), median(base))}; p99 ratio: ${ratio(percentile(hook, 99), percentile(base, 99))}`);
  console.log(`p99 ${percentile(hook, 99).toFixed(2)} ms against the 20 ms target: ${percentile(hook, 99) <= 20 ? 'met' : 'NOT met'}`);
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

async function main(): Promise<void> {
  await acknowledgementLatency();
  await pushToLive();
}
