import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../../services/shared/testing/ports.js';
import { siteEnvOf } from '../sites/site-env.js';
import { eventually } from '../../test/helpers/wait.js';

/**
 * A site container's entry (infra/sites/main.ts) as a real process: the site it starts sees the
 * variables the stack declares for it as SITE_ENV_<NAME>, and nothing else of the container's.
 */

const REPO = new URL('../..', import.meta.url).pathname;
/** A site that answers with its own environment. */
const ECHO_SITE = `
import { createServer } from 'node:http';
createServer((req, res) => res.end(JSON.stringify(process.env))).listen(Number(process.env.PORT), process.env.HOST);
process.on('SIGTERM', () => process.exit(0));
`;

const started: ChildProcess[] = [];
const dirs: string[] = [];
afterAll(() => {
  for (const child of started) child.kill('SIGTERM');
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function startEntry(env: Record<string, string>): { child: ChildProcess; exited: Promise<{ code: number | null; stderr: string }> } {
  const child = spawn(process.execPath, ['--import', 'tsx', 'infra/sites/main.ts'], { cwd: REPO, env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  started.push(child);
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  child.stdout!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return { child, exited: new Promise((resolve) => child.once('exit', (code) => resolve({ code, stderr }))) };
}

describe('what a site is told', () => {
  it('the site gets its SITE_ENV_ variables under their own names, and none of the container\'s other variables', async () => {
    const root = mkdtempSync(join(tmpdir(), 'site-env-'));
    dirs.push(root);
    mkdirSync(join(root, 'deploys/r1'), { recursive: true });
    writeFileSync(join(root, 'deploys/r1/server.mjs'), ECHO_SITE);
    symlinkSync('deploys/r1', join(root, 'live'));
    const port = await freePort();
    startEntry({
      SITE_SERVICE: 'astro-main',
      SITE_PORT: String(port),
      SITE_DEPLOY_DIR: root,
      SITES_CONTROL_SOCKET: join(root, 'control.sock'),
      SITES_HOST: '127.0.0.1',
      SITE_START_COMMAND: `${process.execPath} server.mjs`,
      SITE_ENV_API_PUBLIC_URL: 'https://api.example.org',
      SITE_ENV_KRATOS_PUBLIC_URL: 'https://id.example.org',
      BUILDER_SECRET_OF_THE_CONTAINER: 'never-passed-on',
    });
    const seen = await eventually('the site answering', () => fetch(`http://127.0.0.1:${port}/`).then((r) => r.json() as Promise<Record<string, string>>, () => undefined), 10_000);
    expect(seen.API_PUBLIC_URL).toBe('https://api.example.org');
    expect(seen.KRATOS_PUBLIC_URL).toBe('https://id.example.org');
    expect(seen.PORT).toBe(String(port));
    expect(seen.NODE_ENV).toBe('production');
    expect(Object.keys(seen!).filter((k) => k.startsWith('SITE_') || k.startsWith('BUILDER_'))).toEqual([]);
  }, 30_000);

  it('a reserved or malformed name stops the entry with exit 2 before any site starts', async () => {
    const { exited } = startEntry({ SITE_SERVICE: 'astro-main', SITE_PORT: '3999', SITE_DEPLOY_DIR: '/nonexistent', SITE_ENV_NODE_OPTIONS: '--require=/tmp/x.js' });
    const { code, stderr } = await exited;
    expect(code).toBe(2);
    expect(stderr).toContain('SITE_ENV_NODE_OPTIONS');
  }, 30_000);

  it.each(['PATH', 'PORT', 'HOST', 'NODE_ENV', 'NODE_OPTIONS', 'LD_PRELOAD', 'lower', '1X'])('refuses SITE_ENV_%s', (name) => {
    expect(() => siteEnvOf({ [`SITE_ENV_${name}`]: 'x' })).toThrow(/a site variable must be/);
  });
});
