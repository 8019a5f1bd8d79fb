import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isPinnedImage, NODE_IMAGE } from '../images.js';

/**
 * The project's Dockerfiles. The static rules always run; `docker build` runs only where a Docker
 * engine answers (`docker info`), hadolint only where it is installed. Each says why when it skips.
 */

const REPO = join(import.meta.dirname, '..', '..');
const DIR = import.meta.dirname;
const DOCKERFILES = readdirSync(DIR).filter((f) => f.endsWith('.Dockerfile')).sort();
const read = (file: string) => readFileSync(join(DIR, file), 'utf8');

/** Instructions with line continuations joined and comments dropped. */
function instructions(text: string): { keyword: string; args: string }[] {
  return text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith('#'))
    .map((line) => ({ keyword: (line.split(/\s+/)[0] as string).toUpperCase(), args: line.slice(line.indexOf(' ') + 1).trim() }));
}

function finalStage(text: string) {
  const all = instructions(text);
  const lastFrom = all.map((i) => i.keyword).lastIndexOf('FROM');
  return all.slice(lastFrom);
}

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
      const sources = copy.args.split(/\s+/).slice(0, -1);
      for (const source of sources) expect(existsSync(join(REPO, source)), `${file}: COPY ${source}`).toBe(true);
    }
  });

  it('the entry points the images start exist', () => {
    const entries = DOCKERFILES.flatMap((file) => {
      const cmd = finalStage(read(file)).find((i) => i.keyword === 'CMD');
      return (JSON.parse(cmd?.args ?? '[]') as string[]).filter((a) => a.endsWith('.ts'));
    });
    expect(entries.sort()).toEqual(['identity/src/app/server.ts', 'infra/geoserver/cli.ts', 'services/api/src/server.ts', 'services/webhook/src/server.ts']);
    for (const entry of entries) expect(existsSync(join(REPO, entry)), entry).toBe(true);
  });

  it('.dockerignore keeps dependencies, git history, stack files and env files out of the context', () => {
    const ignored = readFileSync(join(REPO, '.dockerignore'), 'utf8').split('\n').map((l) => l.trim());
    for (const pattern of ['**/node_modules', '.git', 'infra/Pulumi*.yaml', '.env', '.env.*', '**/*.test.ts']) expect(ignored, pattern).toContain(pattern);
  });
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
