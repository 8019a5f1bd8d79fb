/**
 * Host integration: the secrets file and its rotation, systemd units checked by
 * `systemd-analyze verify`, the polkit rule evaluated, a Caddy started on loopback from the
 * rendered config routing each domain by Host header, and manual deploy / rollback via the CLI.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { request, createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { runInNewContext } from 'node:vm';
import { stringify } from 'yaml';
import { afterAll, describe, expect, it } from 'vitest';
import { renderCaddyfile } from '../src/host/render/caddy.js';
import { runHostCli } from '../src/host/cli.js';
import type { Target } from '../../shared/targets.js';
import { parseSecretsFile, readSecretsFile } from '../src/secrets.js';
import { lacks, requirements } from '../../../test/helpers/requirements.js';
import { deployEnv, FixtureRepo, fetchBuild, freePort, liveRelease, makeTempDir, stopFixtureSites, waitFor } from './support/helpers.js';
import { pushPayload, sendGitlab, seedTargets, startHarness } from './support/webhook-harness.js';

const root = makeTempDir('host');
const cleanups: (() => void | Promise<void>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  stopFixtureSites(root);
});

const cli = (args: string[], env: NodeJS.ProcessEnv = {}) => {
  const lines: string[] = [];
  const code = runHostCli(args, { ...process.env, ...env }, (line) => lines.push(line));
  return { code, output: lines.join('\n') };
};

describe('secrets file', () => {
  const file = join(root, 'etc/secrets.env');

  it('init writes 32 random bytes in hex per target with mode 600 and refuses to overwrite', () => {
    expect(cli(['secrets', 'init', '--file', file]).code).toBe(0);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const values = readSecretsFile(file);
    expect(Object.keys(values).sort()).toEqual(seedTargets().map((t) => t.secret).sort());
    for (const value of Object.values(values)) expect(value).toMatch(/^[0-9a-f]{64}$/);
    expect(new Set(Object.values(values)).size).toBe(5);
    expect(cli(['secrets', 'init', '--file', file]).code).toBe(2);
    expect(readSecretsFile(file)).toEqual(values);
  });

  it('rotation: the server accepts the current and the previous secret while both are set, then only the new one', async () => {
    const before = readSecretsFile(file);
    expect(cli(['secrets', 'rotate', 'main', '--file', file]).code).toBe(0);
    const rotated = readSecretsFile(file);
    expect(rotated.SECRET_MAIN_PREVIOUS).toBe(before.SECRET_MAIN);
    expect(rotated.SECRET_MAIN).not.toBe(before.SECRET_MAIN);
    expect(statSync(file).mode & 0o777).toBe(0o600);

    const h = await startHarness({ secrets: rotated });
    cleanups.push(() => h.close());
    expect((await sendGitlab(h.url, pushPayload('main'), rotated.SECRET_MAIN!)).status).toBe(202);
    expect((await sendGitlab(h.url, pushPayload('main'), rotated.SECRET_MAIN_PREVIOUS!)).status).toBe(202);

    // The harness's secrets file is what SIGHUP re-reads: finish the rotation there and reload.
    const serverFile = join(h.root, 'webhook-secrets.env');
    expect(cli(['secrets', 'finish', 'SECRET_MAIN', '--file', serverFile]).code).toBe(0);
    expect(parseSecretsFile(readFileSync(serverFile, 'utf8')).SECRET_MAIN_PREVIOUS).toBeUndefined();
    h.server.reloadSecrets();
    expect((await sendGitlab(h.url, pushPayload('main'), rotated.SECRET_MAIN_PREVIOUS!)).status).toBe(401);
    expect((await sendGitlab(h.url, pushPayload('main'), rotated.SECRET_MAIN!)).status).toBe(202);
  });

  it('a reload that finds a broken secrets file keeps the old secrets', async () => {
    const h = await startHarness();
    cleanups.push(() => h.close());
    writeFileSync(join(h.root, 'webhook-secrets.env'), 'SECRET_MAIN=short\n', { mode: 0o600 });
    expect(() => h.server.reloadSecrets()).toThrow(/SECRET_MAIN/);
    expect((await sendGitlab(h.url, pushPayload('main'), h.secrets.SECRET_MAIN!)).status).toBe(202);
  });
});

describe('systemd units and privilege rules', () => {
  const out = join(root, 'systemd');

  it('renders one unit per target and one for the webhook', () => {
    expect(cli(['systemd', '--out', out, '--node', process.execPath, '--site-exec', `${process.execPath} dist/server/entry.mjs`]).code).toBe(0);
    const units = readdirSync(out).filter((f) => f.endsWith('.service')).sort();
    expect(units).toEqual([
      'astro-develop.service',
      'astro-feature-team-de1.service',
      'astro-feature-team-de2.service',
      'astro-feature-team-fv.service',
      'astro-main.service',
      'webhook-server.service',
    ]);
    expect(readFileSync(join(out, 'astro-feature-team-de1.service'), 'utf8')).toContain('Environment=PORT=3002');
  });

  it.skipIf(lacks('systemd-analyze of the rendered units', requirements.systemdAnalyze()))('the rendered units pass systemd-analyze verify', () => {
    const units = readdirSync(out).filter((f) => f.endsWith('.service')).sort();
    expect(units.length).toBe(seedTargets().length + 1);
    const result = spawnSync('systemd-analyze', ['verify', ...units.map((u) => join(out, u))], { encoding: 'utf8' });
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
  });

  it('sandboxes every site unit: its own port only, loopback only, bounded resources', () => {
    for (const target of seedTargets()) {
      const unit = readFileSync(join(out, `astro-${target.key.replace(/\//g, '-')}.service`), 'utf8');
      // A site cannot bind another target's port or the webhook's (9321), nor reach beyond loopback.
      expect(unit).toContain(`SocketBindAllow=tcp:${target.port}\nSocketBindDeny=any`);
      expect(unit).toMatch(/^IPAddressDeny=any$/m);
      expect(unit).toMatch(/^IPAddressAllow=localhost$/m);
      for (const line of ['NoNewPrivileges=yes', 'ProtectSystem=strict', 'PrivateTmp=yes', 'PrivateDevices=yes', 'RestrictNamespaces=yes', 'CapabilityBoundingSet=']) expect(unit).toMatch(new RegExp(`^${line}$`, 'm'));
      expect(unit).toMatch(/^MemoryMax=\d+[KMG]$/m);
      expect(unit).toMatch(/^TasksMax=\d+$/m);
      expect(unit).toMatch(/^CPUQuota=\d+%$/m);
    }
  });

  it.skipIf(lacks('systemd-analyze of the rendered units', requirements.systemdAnalyze()))('every site unit has an exposure of at most 2.0 in systemd-analyze security', () => {
    const units = readdirSync(out).filter((f) => f.startsWith('astro-') && f.endsWith('.service')).sort();
    expect(units.length).toBe(seedTargets().length);
    const exposures: Record<string, number> = {};
    for (const unit of units) {
      const result = spawnSync('systemd-analyze', ['security', '--offline=true', join(out, unit)], { encoding: 'utf8' });
      const level = /Overall exposure level for \S+: (\d+\.\d)/.exec(result.stdout + result.stderr);
      expect(level, result.stdout + result.stderr).not.toBeNull();
      exposures[unit] = Number(level![1]);
    }
    console.log(`systemd-analyze security: ${Object.entries(exposures).map(([u, e]) => `${u} ${e}`).join(', ')}`);
    for (const [unit, exposure] of Object.entries(exposures)) expect(exposure, unit).toBeLessThanOrEqual(2.0);
  });

  it('lets the service user restart exactly the site units through sudo, nothing else', () => {
    const sudoers = readFileSync(join(out, 'webhook-deploy.sudoers'), 'utf8');
    const commands = [...sudoers.matchAll(/\/usr\/bin\/systemctl [^,\\\n]+/g)].map((m) => m[0].trim());
    expect(commands).toEqual(seedTargets().map((t) => `/usr/bin/systemctl restart astro-${t.key.replace(/\//g, '-')}`));
    expect(sudoers).toMatch(/^deploy ALL=\(root\) NOPASSWD: SITE_RESTARTS$/m);
    expect(sudoers).not.toMatch(/\*|NOPASSWD: ALL/);
  });

  it('the polkit rule allows restart of a site unit by the service user and nothing else', () => {
    const rule = readFileSync(join(out, '50-webhook-deploy.rules'), 'utf8');
    let check: ((action: unknown, subject: unknown) => string) | undefined;
    const polkit = { addRule: (fn: typeof check) => (check = fn), Result: { YES: 'yes', NOT_HANDLED: 'not-handled' } };
    runInNewContext(rule, { polkit });
    const ask = (user: string, verb: string, unit: string, id = 'org.freedesktop.systemd1.manage-units') =>
      check!({ id, lookup: (key: string) => ({ verb, unit })[key] }, { user });
    expect(ask('deploy', 'restart', 'astro-main.service')).toBe('yes');
    expect(ask('deploy', 'restart', 'astro-feature-team-fv.service')).toBe('yes');
    expect(ask('deploy', 'stop', 'astro-main.service')).toBe('not-handled');
    expect(ask('deploy', 'restart', 'sshd.service')).toBe('not-handled');
    expect(ask('deploy', 'restart', 'webhook-server.service')).toBe('not-handled');
    expect(ask('www-data', 'restart', 'astro-main.service')).toBe('not-handled');
    expect(ask('deploy', 'restart', 'astro-main.service', 'org.freedesktop.systemd1.manage-unit-files')).toBe('not-handled');
  });
});

describe('Caddy', () => {
  it.skipIf(lacks('the Caddy tests of the host config', requirements.caddy()))('the production Caddyfile passes caddy validate', () => {
    const file = join(root, 'Caddyfile');
    expect(cli(['caddy', '--out', file, '--webhook-domain', 'hooks.example.org', '--email', 'ops@example.org']).code).toBe(0);
    const result = spawnSync('caddy', ['validate', '--config', file, '--adapter', 'caddyfile'], {
      encoding: 'utf8',
      env: { ...process.env, XDG_DATA_HOME: join(root, 'caddy-data'), XDG_CONFIG_HOME: join(root, 'caddy-config') },
    });
    expect(result.status, result.stderr).toBe(0);
  });

  it.skipIf(lacks('the Caddy tests of the host config', requirements.caddy()))('a Caddy on loopback started from the rendered config routes each domain to its target by Host header', async () => {
    const backends: Server[] = [];
    const targets: Target[] = [];
    for (const target of seedTargets()) {
      const port = await freePort();
      const server = createServer((_req, res) => res.end(`site ${target.key}`));
      await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
      backends.push(server);
      targets.push({ ...target, port });
    }
    cleanups.push(() => backends.forEach((s) => s.close()));
    const webhookPort = await freePort();
    const webhook = createServer((req, res) => res.end(`webhook ${req.method} ${req.url}`));
    await new Promise<void>((resolve) => webhook.listen(webhookPort, '127.0.0.1', resolve));
    cleanups.push(() => void webhook.close());

    const httpPort = await freePort();
    const file = join(root, 'Caddyfile.loopback');
    writeFileSync(file, renderCaddyfile(targets, { plainHttpPort: httpPort, webhookDomain: 'hooks.example.org', webhookPort }));
    const caddy: ChildProcess = spawn('caddy', ['run', '--config', file, '--adapter', 'caddyfile'], {
      env: { ...process.env, XDG_DATA_HOME: join(root, 'caddy-data'), XDG_CONFIG_HOME: join(root, 'caddy-config') },
      stdio: 'ignore',
    });
    cleanups.push(() => void caddy.kill('SIGKILL'));

    const get = (host: string, path = '/', method = 'GET') =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = request({ host: '127.0.0.1', port: httpPort, path, method, headers: { host } }, (res) => {
          let body = '';
          res.on('data', (chunk: Buffer) => (body += chunk.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        });
        req.on('error', reject);
        req.end();
      });
    await waitFor(() => get(targets[0]!.domain).then(() => true, () => false), 15_000, 'caddy to listen');

    for (const target of targets) {
      const res = await get(target.domain);
      expect(res, target.domain).toEqual({ status: 200, body: `site ${target.key}` });
    }
    expect((await get('hooks.example.org', '/webhook', 'POST')).body).toBe('webhook POST /webhook');
    expect((await get('hooks.example.org', '/deployments')).status).toBe(404);
  });
});

describe('manual deploy and rollback', () => {
  it('deploys a target by key and rolls it back to the previous release', async () => {
    const repo = new FixtureRepo(join(root, 'repo'));
    const port = await freePort();
    const targetsFile = join(root, 'targets.yaml');
    writeFileSync(targetsFile, stringify({ targets: seedTargets().map((t) => (t.key === 'develop' ? { ...t, port, repo: repo.url } : t)) }));
    const env = { ...deployEnv(root), TARGETS_FILE: targetsFile, DEPLOY_ROOT: join(root, 'sites') };

    repo.commit('develop', { VERSION: 'manual-1\n' });
    expect(cli(['deploy', 'develop'], env).code).toBe(0);
    repo.commit('develop', { VERSION: 'manual-2\n' });
    expect(cli(['deploy', 'develop'], env).code).toBe(0);
    expect((await fetchBuild(port)).version).toBe('manual-2');
    const deployDir = join(root, 'sites/develop');
    expect(readFileSync(join(deployDir, 'restarts.log'), 'utf8')).toContain('restart astro-develop');

    expect(cli(['rollback', 'develop'], env).code).toBe(0);
    expect((await fetchBuild(port)).version).toBe('manual-1');
    expect(liveRelease(deployDir)).toMatch(/^deploys\/\d{14}$/);
    expect(cli(['deploy', 'no-such-target'], env).code).toBe(2);
  });
});
