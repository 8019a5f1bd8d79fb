/**
 * The project images' commands, TypeScript through tsx (how the images ran before) against the
 * compiled JavaScript the images run now (`npm run bench -- images`).
 *
 * For each command: start time (spawn → the health endpoint answers 200, or → exit for a one-shot
 * job) and idle RSS (VmRSS 1.5 s after it became healthy). The tsx baseline runs from the checkout
 * as `node --import tsx <entry>.ts`; the compiled command runs from the image's file set assembled
 * exactly as its Dockerfile assembles it (infra/docker/image.ts), as `node <entry>.js`. Rounds
 * alternate which of the two goes first; medians and the ratio compiled/tsx are printed. A bare
 * node:http server with a pg pool is the floor for the services' RSS.
 *
 * BENCH_QUICK=1: one round instead of three.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { assembleImage, type AssembledImage } from '../infra/docker/image.js';
import { freePort } from '../services/shared/testing/ports.js';
import { median, printTable, ratio } from './stats.js';
import { openBenchDatabase, repoRoot } from './support.js';

const ROUNDS = process.env.BENCH_QUICK === '1' ? 1 : 3;
const SETTLE_MS = 1_500;

interface Command {
  name: string;
  dockerfile: string;
  /** The entry point without extension, relative to the repository / image working directory. */
  entry: string;
  env(port: number, scratch: string): Record<string, string>;
  /** Health path for a service; undefined for a one-shot job (measured until it exits). */
  health?: string;
  /** Exit code a one-shot job is expected to end with. */
  exitCode?: number;
}

interface Sample {
  startMs: number;
  rssMiB: number;
}

function rssMiB(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) / 1024 : Number.NaN;
}

async function measure(argv: string[], cwd: string, env: Record<string, string>, port: number, command: Pick<Command, 'health' | 'exitCode' | 'name'>): Promise<Sample> {
  const started = performance.now();
  const child = spawn(process.execPath, argv, { cwd, env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  try {
    if (!command.health) {
      const code = await exited;
      if (code !== command.exitCode) throw new Error(`${command.name} exited with ${code}, expected ${command.exitCode}: ${stderr}`);
      return { startMs: performance.now() - started, rssMiB: Number.NaN };
    }
    for (;;) {
      if (child.exitCode !== null) throw new Error(`${command.name} exited with ${child.exitCode}: ${stderr}`);
      const status = await fetch(`http://127.0.0.1:${port}${command.health}`).then((r) => r.status, () => 0);
      if (status === 200) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    const startMs = performance.now() - started;
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    return { startMs, rssMiB: rssMiB(child.pid!) };
  } finally {
    if (child.exitCode === null) {
      child.kill('SIGTERM');
      await exited;
    }
  }
}

const BARE_SERVER = `
import http from 'node:http';
import pg from 'pg';
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 });
await pool.query('select 1');
http.createServer(async (req, res) => { res.end('ok'); }).listen(Number(process.env.PORT), '127.0.0.1');
`;

async function main(): Promise<void> {
  const scratch = mkdtempSync(join(tmpdir(), 'bench-images-'));
  const database = await openBenchDatabase('images');
  try {
    console.log(`database: ${database.kind}; assembling the four images from their Dockerfiles…`);
    const images = new Map<string, AssembledImage>();
    for (const dockerfile of ['api', 'identity', 'ops', 'webhook']) {
      images.set(dockerfile, assembleImage(join(repoRoot, 'infra/docker', `${dockerfile}.Dockerfile`), { repoRoot, into: join(scratch, dockerfile) }));
    }
    const targets = (parseYaml(readFileSync(join(repoRoot, 'config/targets.yaml'), 'utf8')) as { targets: { secret: string }[] }).targets;
    const commands: Command[] = [
      {
        name: 'api-migrate (job)',
        dockerfile: 'api',
        entry: 'services/api/src/db/migrate-cli',
        env: () => ({ NODE_ENV: 'production', DATABASE_URL: database.url, LOG_LEVEL: 'warn' }),
        exitCode: 0,
      },
      {
        name: 'api',
        dockerfile: 'api',
        entry: 'services/api/src/server',
        env: (port, dir) => ({
          NODE_ENV: 'production',
          PORT: String(port),
          DATABASE_URL: database.url,
          DATA_DIR: dir,
          AUTH_ISSUER: 'https://oauth.example.org/',
          AUTH_JWKS_URL: 'http://127.0.0.1:9/.well-known/jwks.json',
          AUTH_AUDIENCE: 'geodata-api',
          HYDRA_ADMIN_URL: 'http://127.0.0.1:9',
          KRATOS_PUBLIC_URL: 'http://127.0.0.1:9',
          KRATOS_ADMIN_URL: 'http://127.0.0.1:9',
          LOG_LEVEL: 'warn',
        }),
        health: '/healthz',
      },
      {
        name: 'login',
        dockerfile: 'identity',
        entry: 'identity/src/app/server',
        env: (port) => ({
          NODE_ENV: 'production',
          IDENTITY_PORT: String(port),
          IDENTITY_AUTH_URL: 'https://auth.example.org',
          IDENTITY_APP_URL: 'https://app.example.org',
          KRATOS_PUBLIC_URL: 'https://id.example.org',
          KRATOS_ADMIN_URL: 'http://127.0.0.1:9',
          HYDRA_ADMIN_URL: 'http://127.0.0.1:9',
          IDENTITY_COOKIE_SECRET: 'x'.repeat(48),
          LOG_LEVEL: 'warn',
        }),
        health: '/health/alive',
      },
      {
        name: 'webhook',
        dockerfile: 'webhook',
        entry: 'services/webhook/src/server',
        env: (port, dir) => ({
          NODE_ENV: 'production',
          WEBHOOK_PORT: String(port),
          DEPLOY_ROOT: join(dir, 'sites'),
          WEBHOOK_STATE_DIR: join(dir, 'state'),
          LOG_LEVEL: 'warn',
          ...Object.fromEntries(targets.map((t) => [t.secret, `${t.secret}-`.padEnd(40, 'x')])),
        }),
        health: '/health',
      },
      {
        name: 'geoserver-provision (load, exit 2)',
        dockerfile: 'ops',
        entry: 'infra/geoserver/cli',
        env: () => ({ NODE_ENV: 'production' }),
        exitCode: 2,
      },
    ];

    const rows: Record<string, string | number>[] = [];
    const bare: Sample[] = [];
    for (const command of commands) {
      const tsx: Sample[] = [];
      const compiled: Sample[] = [];
      const image = images.get(command.dockerfile)!;
      for (let round = 0; round < ROUNDS; round++) {
        const order = round % 2 === 0 ? (['tsx', 'compiled'] as const) : (['compiled', 'tsx'] as const);
        for (const kind of order) {
          const port = await freePort();
          const dir = mkdtempSync(join(scratch, 'run-'));
          if (kind === 'tsx') tsx.push(await measure(['--import', 'tsx', `${command.entry}.ts`], repoRoot, command.env(port, dir), port, command));
          else compiled.push(await measure([`${command.entry}.js`], image.hostWorkdir, { ...image.env, ...command.env(port, dir) }, port, command));
        }
      }
      const t = { start: median(tsx.map((s) => s.startMs)), rss: median(tsx.map((s) => s.rssMiB)) };
      const c = { start: median(compiled.map((s) => s.startMs)), rss: median(compiled.map((s) => s.rssMiB)) };
      rows.push({
        command: command.name,
        'start tsx ms': Math.round(t.start),
        'start compiled ms': Math.round(c.start),
        'start ratio': ratio(c.start, t.start),
        'idle RSS tsx MiB': Number.isNaN(t.rss) ? '—' : t.rss.toFixed(0),
        'idle RSS compiled MiB': Number.isNaN(c.rss) ? '—' : c.rss.toFixed(0),
        'RSS ratio': Number.isNaN(c.rss) ? '—' : ratio(c.rss, t.rss),
      });
    }
    // The floor: node:http + a pg pool with one connection made, from the API image's node_modules.
    const api = images.get('api')!;
    for (let round = 0; round < ROUNDS; round++) {
      const port = await freePort();
      bare.push(await measure(['--input-type=module', '-e', BARE_SERVER], api.hostWorkdir, { PORT: String(port), DATABASE_URL: database.url }, port, { name: 'bare', health: '/' }));
    }
    rows.push({
      command: 'bare node:http + pg (floor)',
      'start tsx ms': '—',
      'start compiled ms': Math.round(median(bare.map((s) => s.startMs))),
      'start ratio': '—',
      'idle RSS tsx MiB': '—',
      'idle RSS compiled MiB': median(bare.map((s) => s.rssMiB)).toFixed(0),
      'RSS ratio': '—',
    });
    console.log(`\n${ROUNDS} round(s), medians; ratio = compiled / tsx (below 1× is better):`);
    printTable(rows);
  } finally {
    await database.close();
    rmSync(scratch, { recursive: true, force: true });
  }
}

await main();
