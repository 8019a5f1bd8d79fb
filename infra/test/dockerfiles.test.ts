import { build } from 'esbuild';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_NODE_FLAGS } from '../../services/shared/node-flags.js';
import { freePort } from '../../services/shared/testing/ports.js';
import { eventually } from '../../test/helpers/wait.js';
import { isPinnedImage, NODE_IMAGE } from '../images.js';
import { assembleImage, filesUnder, finalStage, instructions, type AssembledImage } from '../docker/image.js';

const asRoot = process.getuid?.() === 0;

/** A folder the given user may write (the server's state once it has given up root). */
function writableBy(user: string, dir: string): string {
  mkdirSync(dir, { recursive: true });
  execFileSync('chown', [user, dir]);
  // Its parents (temporary folders of root) must let that user through.
  for (let parent = dirname(dir); parent !== dirname(parent) && parent.startsWith(tmpdir()) && parent !== tmpdir(); parent = dirname(parent)) chmodSync(parent, 0o755);
  return dir;
}

/**
 * The project's Dockerfiles. The static rules always run; `docker build` runs only where a Docker
 * engine answers (`docker info`), hadolint only where it is installed. Each says why when it skips.
 */

const REPO = join(import.meta.dirname, '..', '..');
const DIR = join(import.meta.dirname, '..', 'docker');
const DOCKERFILES = readdirSync(DIR).filter((f) => f.endsWith('.Dockerfile')).sort();
const read = (file: string) => readFileSync(join(DIR, file), 'utf8');

function commandWorks(command: string, args: string[]): { ok: boolean; reason: string } {
  const result = spawnSync(command, args, { encoding: 'utf8', timeout: 15_000 });
  if (result.error) return { ok: false, reason: `${command} not found (${result.error.message})` };
  if (result.status !== 0) return { ok: false, reason: `\`${command} ${args.join(' ')}\` failed: ${(result.stderr || result.stdout).trim().split('\n')[0]}` };
  return { ok: true, reason: '' };
}

describe('the Dockerfiles', () => {
  it('exist for the API, the webhook server, the login app and the ops jobs', () => {
    expect(DOCKERFILES).toEqual(['api.Dockerfile', 'identity.Dockerfile', 'ops.Dockerfile', 'webhook.Dockerfile']);
  });

  it.each(DOCKERFILES)('%s pins Node 20 by exact tag, the same one as the Pulumi program', (file) => {
    const arg = instructions(read(file)).find((i) => i.keyword === 'ARG' && i.args.startsWith('NODE_IMAGE='));
    expect(arg?.args).toBe(`NODE_IMAGE=${NODE_IMAGE}`);
    expect(NODE_IMAGE).toMatch(/^node:20\.\d+\.\d+-bookworm-slim$/);
    for (const from of instructions(read(file)).filter((i) => i.keyword === 'FROM')) {
      const image = from.args.split(/\s+/)[0] as string;
      expect(image === '${NODE_IMAGE}' || image === 'deps' || isPinnedImage(image), `${file}: FROM ${image}`).toBe(true);
    }
  });

  it.each(DOCKERFILES)('%s is multi-stage and installs exactly the locked dependencies', (file) => {
    const all = instructions(read(file));
    expect(all.filter((i) => i.keyword === 'FROM').length).toBeGreaterThanOrEqual(3);
    expect(all.some((i) => i.keyword === 'RUN' && i.args.includes('npm ci'))).toBe(true);
    expect(all.some((i) => i.keyword === 'RUN' && /npm install(?!\S)/.test(i.args))).toBe(false);
    expect(finalStage(read(file)).some((i) => i.keyword === 'COPY' && i.args.startsWith('--from=runtime-deps'))).toBe(true);
  });

  it.each(DOCKERFILES)('%s runs as the non-root node user with an exec-form command', (file) => {
    const last = finalStage(read(file));
    const users = last.filter((i) => i.keyword === 'USER').map((i) => i.args);
    expect(users.at(-1)).toBe('node');
    const cmd = last.find((i) => i.keyword === 'CMD');
    expect(cmd?.args.startsWith('[')).toBe(true);
  });

  it.each(DOCKERFILES)('%s declares a health check (or none, with the reason, for a one-shot job)', (file) => {
    const healthcheck = finalStage(read(file)).find((i) => i.keyword === 'HEALTHCHECK');
    expect(healthcheck).toBeDefined();
    if (healthcheck?.args === 'NONE') {
      expect(file).toBe('ops.Dockerfile');
      expect(read(file)).toMatch(/# A one-shot job/);
    } else {
      expect(healthcheck?.args).toMatch(/--interval=\S+ .*CMD \[/);
    }
  });

  it.each(DOCKERFILES)('%s copies only paths that exist in the repository', (file) => {
    for (const copy of instructions(read(file)).filter((i) => i.keyword === 'COPY' && !i.args.startsWith('--from'))) {
      const sources = copy.args.split(/\s+/).filter((w) => !w.startsWith('--')).slice(0, -1);
      for (const source of sources) expect(existsSync(join(REPO, source)), `${file}: COPY ${source}`).toBe(true);
    }
  });

  it.each(DOCKERFILES)('%s runs compiled JavaScript with plain node, with no TypeScript runner in the image', (file) => {
    const cmd = JSON.parse(finalStage(read(file)).find((i) => i.keyword === 'CMD')?.args ?? '[]') as string[];
    const [node, ...args] = cmd;
    expect(node).toBe('node');
    // Between node and the entry only the API's V8 flags, the ones npm start and the benchmarks pass
    // too (services/shared/node-flags.ts); nothing that loads code (no --import tsx).
    expect(args.slice(0, -1)).toEqual(file === 'api.Dockerfile' ? API_NODE_FLAGS : []);
    expect(args.at(-1)).toMatch(/\.js$/);
    // tsx runs the build step only; nothing of it reaches the final stage.
    expect(finalStage(read(file)).map((i) => i.args).join('\n')).not.toMatch(/\btsx\b/);
  });

  it('.dockerignore keeps dependencies, git history, stack files and env files out of the context', () => {
    const ignored = readFileSync(join(REPO, '.dockerignore'), 'utf8').split('\n').map((l) => l.trim());
    for (const pattern of ['**/node_modules', '.git', 'infra/Pulumi*.yaml', '.env', '.env.*', '**/*.test.ts']) expect(ignored, pattern).toContain(pattern);
  });
});

/**
 * Each image's file set, assembled as its Dockerfile assembles it (infra/docker/image.ts), in a
 * temporary folder: only what the Dockerfile copies, only production dependencies, the build step run.
 */
describe('each image assembled from its Dockerfile, without Docker', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'images-'));
  const images = new Map<string, AssembledImage>();
  beforeAll(() => {
    for (const file of DOCKERFILES) images.set(file, assembleImage(join(DIR, file), { repoRoot: REPO, into: join(scratch, file) }));
  }, 300_000);
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));
  const image = (file: string) => images.get(file)!;

  it.each(DOCKERFILES)('%s holds its command, no TypeScript source, no test and no development dependency', (file) => {
    const img = image(file);
    expect(existsSync(join(img.hostWorkdir, img.cmd.at(-1)!)), img.cmd.at(-1)).toBe(true);
    const code = filesUnder(img.hostWorkdir).filter((f) => !f.startsWith('node_modules/'));
    expect(code.filter((f) => f.endsWith('.ts'))).toEqual([]);
    expect(code.filter((f) => /(^|\/)(test|testing)\//.test(f))).toEqual([]);
    for (const devOnly of ['tsx', 'vitest', 'typescript-eslint', '@pulumi/pulumi', 'playwright-core', 'esbuild']) {
      expect(existsSync(join(img.hostWorkdir, 'node_modules', devOnly)), devOnly).toBe(false);
    }
  });

  // Every module the image ships, bundled from the image's folder alone: an import of a file the
  // Dockerfile did not copy, or of a package that is only a devDependency, fails here.
  it.each(DOCKERFILES)('%s: every import of every module it ships resolves inside the image', async (file) => {
    const img = image(file);
    const entries = filesUnder(img.hostWorkdir).filter((f) => !f.startsWith('node_modules/') && /\.m?js$/.test(f));
    expect(entries.length).toBeGreaterThan(3);
    const result = await build({
      entryPoints: entries.map((e) => join(img.hostWorkdir, e)),
      absWorkingDir: img.hostWorkdir,
      bundle: true,
      write: false,
      platform: 'node',
      format: 'esm',
      outdir: join(scratch, 'bundle-out'),
      logLevel: 'silent',
    }).catch((error: { errors: { text: string; location: { file: string } | null }[] }) => ({ errors: error.errors }));
    expect(result.errors.map((e) => `${e.location?.file ?? '?'}: ${e.text}`)).toEqual([]);
  }, 120_000);

  // ESM links every static import before the first line runs: reaching the configuration check
  // (exit 2, one line) or listening proves the module graph loads with plain node.
  const starts: Record<string, { env: (port: number, home: string) => Record<string, string>; expect: 'listens' | 'configuration error'; probe?: string }> = {
    'api.Dockerfile': { env: () => ({}), expect: 'configuration error' },
    'ops.Dockerfile': { env: () => ({}), expect: 'configuration error' },
    'identity.Dockerfile': {
      env: (port) => ({
        IDENTITY_PORT: String(port),
        IDENTITY_AUTH_URL: 'https://auth.example.org',
        IDENTITY_APP_URL: 'https://app.example.org',
        KRATOS_PUBLIC_URL: 'https://id.example.org',
        KRATOS_ADMIN_URL: 'http://127.0.0.1:9',
        HYDRA_ADMIN_URL: 'http://127.0.0.1:9',
        IDENTITY_COOKIE_SECRET: 'x'.repeat(48),
      }),
      expect: 'listens',
      probe: '/health/alive',
    },
    'webhook.Dockerfile': {
      env: (port, home) => ({
        WEBHOOK_PORT: String(port),
        // As the stack declares it: started as root, the server gives up root for WEBHOOK_USER
        // (the stack's `node`; `nobody` where this machine has no such user). Not root: no
        // launcher can switch users, so isolation is declined explicitly.
        ...(asRoot ? { WEBHOOK_USER: 'nobody', WEBHOOK_STATE_DIR: writableBy('nobody', join(home, 'state')) } : { DEPLOY_ISOLATION: 'none' }),
        // One secret per target of the targets file the image carries.
        ...Object.fromEntries(
          (parseYaml(readFileSync(join(REPO, 'config/targets.yaml'), 'utf8')) as { targets: { secret: string }[] }).targets.map((t) => [t.secret, randomBytes(32).toString('hex')]),
        ),
      }),
      expect: 'listens',
      probe: '/health',
    },
  };

  it.each(DOCKERFILES)('%s: its command starts from the image folder with plain node', async (file) => {
    const img = image(file);
    const plan = starts[file];
    expect(plan, `no start plan for ${file}`).toBeDefined();
    const port = await freePort();
    const home = mkdtempSync(join(scratch, 'home-'));
    const child = spawn(img.cmd[0] === 'node' ? process.execPath : img.cmd[0]!, img.cmd.slice(1), {
      cwd: img.hostWorkdir,
      env: { PATH: process.env.PATH ?? '', HOME: home, ...img.env, DATA_DIR: home, WEBHOOK_STATE_DIR: join(home, 'state'), DEPLOY_ROOT: join(home, 'sites'), ...plan!.env(port, home) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      if (plan!.expect === 'configuration error') {
        expect(await exited, output).toBe(2);
        expect(output).toMatch(/^configuration error: /m);
      } else {
        // Answered 200, or the process ended (then the status says it never answered).
        const status = await eventually(
          `${plan!.probe} answering 200 or the process ending`,
          async () => {
            const answered = await fetch(`http://127.0.0.1:${port}${plan!.probe!}`).then((r) => r.status, () => 0);
            return answered === 200 || child.exitCode !== null ? { answered } : undefined;
          },
          20_000,
          100,
        );
        expect(status.answered, output).toBe(200);
      }
      expect(output).not.toMatch(/ERR_MODULE_NOT_FOUND|Cannot find (module|package)/);
    } finally {
      child.kill('SIGTERM');
      await exited;
    }
  }, 60_000);

  it('an image that copies its package without the ground floor fails the import check, naming the missing file', async () => {
    // A context holding the API's sources and a Dockerfile that forgets services/shared.
    const context = mkdtempSync(join(scratch, 'context-'));
    for (const path of ['package.json', 'package-lock.json', '.dockerignore', 'services/api', 'infra/docker/build.ts', 'config']) {
      cpSync(join(REPO, path), join(context, path), { recursive: true });
    }
    symlinkSync(join(REPO, 'node_modules'), join(context, 'node_modules'));
    const forgetful = read('api.Dockerfile').replace(/^COPY services\/shared .*$/m, '').replace('services/shared services/api', 'services/api');
    writeFileSync(join(context, 'forgetful.Dockerfile'), forgetful);
    const img = assembleImage(join(context, 'forgetful.Dockerfile'), { repoRoot: context, into: join(scratch, 'forgetful') });
    const failure = await build({ entryPoints: [join(img.hostWorkdir, img.cmd.at(-1)!)], absWorkingDir: img.hostWorkdir, bundle: true, write: false, platform: 'node', format: 'esm', logLevel: 'silent' }).then(
      () => undefined,
      (error: { errors: { text: string }[] }) => error.errors.map((e) => e.text).join('\n'),
    );
    expect(failure).toMatch(/Could not resolve "\.\.\/\.\.\/shared\/[\w/-]+\.js"/);
  }, 300_000);
});

const docker = commandWorks('docker', ['info']);
if (!docker.ok) console.log(`skipping docker build of ${DOCKERFILES.join(', ')}: no Docker engine (${docker.reason})`);

describe.skipIf(!docker.ok)('docker build (needs a Docker engine)', () => {
  it.each(DOCKERFILES)('%s builds, and the image runs as a non-root user', (file) => {
    const tag = `geodata-test/${file.replace('.Dockerfile', '')}:ci`;
    execFileSync('docker', ['build', '-f', join(DIR, file), '-t', tag, REPO], { stdio: 'inherit', timeout: 900_000 });
    const uid = execFileSync('docker', ['run', '--rm', '--entrypoint', 'id', tag, '-u'], { encoding: 'utf8' }).trim();
    expect(uid).not.toBe('0');
  }, 900_000);
});

const hadolint = commandWorks('hadolint', ['--version']);
if (!hadolint.ok) console.log(`skipping hadolint: not installed (${hadolint.reason})`);

describe.skipIf(!hadolint.ok)('hadolint (when installed)', () => {
  it.each(DOCKERFILES)('%s is hadolint-clean', (file) => {
    const result = spawnSync('hadolint', [join(DIR, file)], { encoding: 'utf8' });
    expect(result.stdout + result.stderr).toBe('');
    expect(result.status).toBe(0);
  });
});
