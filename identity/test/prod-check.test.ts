import { execFile, execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer as createTlsServer } from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { SMTPServer } from 'smtp-server';
import { beforeAll, describe, expect, it } from 'vitest';
import type { DeclaredContainer, DeclaredStack } from '../../services/shared/declared-stack.js';
import { readDeclaredStack, type DeclaredResult } from '../src/prod-check/declared.js';
import { CONFIG_DIR } from '../../services/shared/identity-config/render.js';
import { runChecklist, type ChecklistItem } from '../src/prod-check/checklist.js';
import { VALID_ENV } from './fixtures.js';

/** The production checklist: every item passes and fails for the reason it names. */

const run = promisify(execFile);
const ENV = { ...VALID_ENV, IDENTITY_COOKIE_SECRET: 'c'.repeat(40) };

const REPO = join(import.meta.dirname, '..', '..');
let DECLARED: DeclaredResult;
let STACK: DeclaredStack;

beforeAll(async () => {
  // The Pulumi program under the runtime mocks with the example stack file, as the CLI reads it.
  DECLARED = await readDeclaredStack(REPO);
  if (!DECLARED.ok) throw new Error(DECLARED.reason);
  STACK = DECLARED.stack;
}, 120_000);

/** The declared stack with one thing broken, as a wrong program would declare it. */
function broken(change: (stack: DeclaredStack) => void): DeclaredResult {
  const copy = structuredClone(STACK);
  change(copy);
  return { ok: true, stack: copy };
}

const good = () => ({ repoRoot: REPO, declared: DECLARED });

function byName(items: ChecklistItem[], fragment: string): ChecklistItem {
  const found = items.find((i) => i.name.includes(fragment));
  if (!found) throw new Error(`no item ${fragment}`);
  return found;
}

describe('production checklist', () => {
  it('prints the eight items of the seed list and the two about branch sites; the declared stack passes every deployment item', async () => {
    const items = await runChecklist({ env: ENV, ...good() });
    expect(items.map((i) => i.name)).toEqual([
      'Hydra system secret ≥ 32 characters',
      'database passwords outside the stack and compose files',
      'TLS certificates for every auth domain',
      'admin APIs (Kratos 4434, Hydra 4445) internal only',
      'login rate limiting on',
      'CORS restricted to own domains',
      'SMTP reachable and a test mail sent',
      'database backup job present',
      'preview sites outside the session cookie domain',
      'branch sites isolated from databases, GeoServer and Ory',
      'GeoServer writes tied to platform users',
    ]);
    expect(items.filter((i) => !i.ok).map((i) => i.name)).toEqual(['TLS certificates for every auth domain', 'SMTP reachable and a test mail sent']);
    expect(byName(items, 'TLS').detail).toContain('not verified: run with --live');
    expect(byName(items, 'SMTP').detail).toContain('not verified: run with --send-test-mail');
  });

  it('without infra/ the deployment items fail honestly, with the reason', async () => {
    const empty = mkdtempSync(join(tmpdir(), 'prod-check-'));
    const items = await runChecklist({ env: ENV, repoRoot: empty });
    expect(byName(items, 'backup')).toMatchObject({ ok: false, detail: expect.stringContaining('infra/ does not exist yet') });
    expect(byName(items, 'admin APIs').detail).toContain('infra/ does not exist yet');
    expect(byName(items, 'passwords').ok).toBe(false);
    expect(byName(items, 'preview').ok).toBe(false);
  });

  it('a short system secret fails naming secrets.system[0]', async () => {
    const items = await runChecklist({ env: { ...ENV, HYDRA_SECRETS_SYSTEM: 'x'.repeat(20) }, ...good() });
    expect(byName(items, 'system secret')).toMatchObject({ ok: false, detail: 'secrets.system[0] must be at least 32 characters, has 20' });
  });

  it('a container given a database password outside a Pulumi secret fails, naming the container and variable', async () => {
    const declared = broken((stack) => {
      const api = stack.containers.find((c) => c.name === 'api') as DeclaredContainer;
      api.envIsSecret = false;
    });
    expect(byName(await runChecklist({ env: ENV, repoRoot: REPO, declared }), 'passwords')).toMatchObject({ ok: false, detail: 'api receives DATABASE_URL outside a Pulumi secret' });
  });

  it('a published admin port fails the admin item', async () => {
    const declared = broken((stack) => (stack.containers.find((c) => c.name === 'hydra') as DeclaredContainer).ports.push({ internal: 4445, external: 4445, protocol: 'tcp' }));
    expect(byName(await runChecklist({ env: ENV, repoRoot: REPO, declared }), 'admin APIs')).toMatchObject({ ok: false, detail: 'hydra publishes admin port 4445 on the host (as 4445)' });
  });

  it('a site without the /admin 403 rule fails the admin item, naming the site', async () => {
    const declared = broken((stack) => {
      const lines = stack.caddyfile.split('\n');
      const site = lines.indexOf('api.example.org {');
      const respond = lines.findIndex((l, i) => i > site && l.includes('respond @outside_internal_range'));
      lines.splice(respond, 1);
      stack.caddyfile = lines.join('\n');
    });
    expect(byName(await runChecklist({ env: ENV, repoRoot: REPO, declared }), 'admin APIs')).toMatchObject({
      ok: false,
      detail: 'the proxy does not answer 403 to /admin from outside the internal ranges on api.example.org',
    });
  });

  it('a stack without the backup service fails the backup item', async () => {
    const declared = broken((stack) => (stack.containers = stack.containers.filter((c) => c.name !== 'backup')));
    expect(byName(await runChecklist({ env: ENV, repoRoot: REPO, declared }), 'backup')).toMatchObject({ ok: false, detail: 'no service runs a pg_dump backup script' });
    const partial = broken((stack) => {
      const backup = stack.containers.find((c) => c.name === 'backup') as DeclaredContainer;
      backup.env.BACKUP_DATABASES = 'features=features-db:5432:features:postgres';
    });
    expect(byName(await runChecklist({ env: ENV, repoRoot: REPO, declared: partial }), 'backup').detail).toBe(
      'the kratos database is not in any backup (BACKUP_DATABASES of backup); the hydra database is not in any backup (BACKUP_DATABASES of backup)',
    );
  });

  it('a stack file with a preview site under the cookie domain fails: the program refuses it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'prod-check-preview-'));
    const targets = join(dir, 'targets.yaml');
    writeFileSync(targets, readFileSync(join(REPO, 'config', 'targets.yaml'), 'utf8').replace('de1.example-preview.net', 'de1.sites.example.org'));
    const stackFile = join(dir, 'Pulumi.prod.yaml');
    writeFileSync(stackFile, `${readFileSync(join(REPO, 'infra', 'Pulumi.example.yaml'), 'utf8')}  geodata-platform:targetsFile: ${targets}\n`.replace(/^ {2}geodata-platform:targetsFile: config\/targets\.yaml.*$/m, ''));
    const item = byName(await runChecklist({ env: ENV, repoRoot: REPO, stackFile }), 'preview');
    expect(item.ok).toBe(false);
    expect(item.detail).toContain('the preview site feature/team-de1 (de1.sites.example.org) lies within the session cookie domain example.org');
  }, 120_000);

  it('a preview site allowed as a CORS origin fails, naming the container', async () => {
    const declared = broken((stack) => {
      const api = stack.containers.find((c) => c.name === 'api') as DeclaredContainer;
      api.env.CORS_ORIGINS = `${api.env.CORS_ORIGINS},https://de1.example-preview.net`;
    });
    expect(byName(await runChecklist({ env: ENV, repoRoot: REPO, declared }), 'preview')).toMatchObject({ ok: false, detail: 'api allows the preview site de1.example-preview.net as a CORS origin' });
  });

  /** The isolation item's problems for a declared stack. */
  async function isolation(declared: DeclaredResult): Promise<string[]> {
    const item = byName(await runChecklist({ env: ENV, repoRoot: REPO, declared }), 'isolated');
    return item.ok ? [] : item.detail.split('; ');
  }
  const site = (stack: DeclaredStack, name: string) => {
    const found = stack.containers.find((c) => c.name === name);
    if (!found) throw new Error(`the declared stack has no container ${name}`);
    return found;
  };

  it('the declared stack has one site container per target, each alone with the proxy on a network of its own', () => {
    const sites = STACK.containers.filter((c) => c.name.startsWith('site-'));
    expect(sites).toHaveLength(STACK.targets.length);
    expect(STACK.containers.find((c) => c.name === 'sites')).toBeUndefined();
    for (const s of sites) {
      expect(s.networks, s.name).toHaveLength(1);
      const members = STACK.containers.filter((c) => c.networks.some((n) => n.name === s.networks[0]?.name)).map((c) => c.name).sort();
      expect(members, s.name).toEqual(['proxy', s.name]);
    }
  });

  it('a site on the application network fails the isolation item, naming what it would reach', async () => {
    const problems = await isolation(broken((stack) => site(stack, 'site-feature-de1').networks.push({ name: 'geodata-app', aliases: [] })));
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(/^site-feature-de1 shares geodata-app with .*: geodata-app holds /);
    const shared = problems[0]?.split(' with ')[1]?.split(': ')[0]?.split(', ');
    for (const name of ['features-db', 'identity-db', 'api', 'kratos']) expect(shared, name).toContain(name);
  });

  it('a site on the admin network, or on GeoServer\'s, fails the isolation item', async () => {
    const admin = await isolation(broken((stack) => site(stack, 'site-main').networks.push({ name: 'geodata-admin', aliases: [] })));
    expect(admin).toHaveLength(1);
    expect(admin[0]).toMatch(/^site-main shares geodata-admin with .*: geodata-admin holds (hydra, kratos|kratos, hydra), the admin network$/);
    const geo = await isolation(broken((stack) => site(stack, 'site-develop').networks.push({ name: 'geodata-geo', aliases: [] })));
    expect(geo).toHaveLength(1);
    expect(geo[0]).toMatch(/^site-develop shares geodata-geo with .*geoserver.*: geodata-geo holds features-db, geoserver$/);
  });

  it('two sites on one network fail the isolation item: each could reach the other', async () => {
    const joined = await isolation(broken((stack) => site(stack, 'site-feature-de2').networks.push({ name: 'geodata-site-feature-de1', aliases: [] })));
    expect(joined).toEqual(['site-feature-de1 shares geodata-site-feature-de1 with site-feature-de2', 'site-feature-de2 shares geodata-site-feature-de1 with site-feature-de1']);
    const moved = await isolation(broken((stack) => (site(stack, 'site-feature-de2').networks = [{ name: 'geodata-site-feature-de1', aliases: ['site-feature-de2'] }])));
    expect(moved).toEqual(['site-feature-de1 shares geodata-site-feature-de1 with site-feature-de2', 'site-feature-de2 shares geodata-site-feature-de1 with site-feature-de1']);
  });

  it('the webhook (or a builder) on a site\'s network, or in its network namespace, fails the isolation item', async () => {
    const network = await isolation(broken((stack) => site(stack, 'webhook').networks.push({ name: 'geodata-site-main', aliases: [] })));
    expect(network).toEqual(['site-main shares geodata-site-main with webhook']);
    const namespace = await isolation(broken((stack) => (site(stack, 'webhook').networkMode = `container:${site(stack, 'site-main').dockerName}`)));
    expect(namespace).toEqual(['webhook run in site-main\'s network namespace']);
    const inside = await isolation(broken((stack) => (site(stack, 'site-develop').networkMode = `container:${site(stack, 'builder-develop').dockerName}`)));
    expect(inside).toEqual([`site-develop runs in the network namespace of ${STACK.containers.find((c) => c.name === 'builder-develop')?.dockerName}`]);
  });

  it('two targets served by one site container, the former shared layout, fail the isolation item', async () => {
    const problems = await isolation(
      broken((stack) => {
        stack.caddyfile = stack.caddyfile.replace('reverse_proxy site-feature-de2:', 'reverse_proxy site-feature-de1:');
        stack.containers = stack.containers.filter((c) => c.name !== 'site-feature-de2');
      }),
    );
    expect(problems).toEqual(['targets feature/team-de1, feature/team-de2 run in one site container, site-feature-de1']);
    const shared = await isolation(broken((stack) => (stack.caddyfile = stack.caddyfile.replace('reverse_proxy site-main:', 'reverse_proxy sites:'))));
    expect(shared).toEqual(['target main (main.sites.example.org) is served by sites, not by a site container of its own (site-<deploy path>)']);
  });

  it('a site network inside the internal ranges, or without a declared subnet, fails the isolation item', async () => {
    const inside = await isolation(broken((stack) => ((stack.networks.find((n) => n.name === 'geodata-site-main') as { subnet?: string }).subnet = '192.168.7.0/28')));
    expect(inside).toEqual(['geodata-site-main (192.168.7.0/28) lies inside the internal ranges: site-main\'s code could reach the guarded paths']);
    const undeclared = await isolation(broken((stack) => delete (stack.networks.find((n) => n.name === 'geodata-site-main') as { subnet?: string }).subnet));
    expect(undeclared).toEqual(['site-main\'s network geodata-site-main has no declared subnet: Docker may pick one inside the internal ranges']);
  });

  it('two sites sharing a volume fail the isolation item', async () => {
    const problems = await isolation(broken((stack) => site(stack, 'site-develop').volumes.push({ volumeName: 'geodata-site-main', containerPath: '/srv/other', readOnly: true })));
    expect(problems).toEqual(['site-main shares volume geodata-site-main with site-develop']);
  });

  it('a GeoServer site that does not strip client identity headers, or sends writes without forward_auth, fails naming the site', async () => {
    const stripped = broken((stack) => (stack.caddyfile = stack.caddyfile.replace(/^\s*request_header -X-Geodata-User\n/m, '')));
    const item = byName(await runChecklist({ env: ENV, repoRoot: REPO, declared: stripped }), 'GeoServer writes');
    expect(item.ok).toBe(false);
    expect(item.detail).toMatch(/geo\.example\.org lets clients send X-Geodata-User/);
    const unasked = broken((stack) => (stack.caddyfile = stack.caddyfile.replace(/forward_auth @write/, 'reverse_proxy @write')));
    expect(byName(await runChecklist({ env: ENV, repoRoot: REPO, declared: unasked }), 'GeoServer writes').detail).toContain('without asking the API');
  });

  it('another container on GeoServer\'s network fails the GeoServer item: it could send the identity headers', async () => {
    const declared = broken((stack) => (stack.containers.find((c) => c.name === 'api') as DeclaredContainer).networks.push({ name: 'geodata-geo', aliases: [] }));
    const item = byName(await runChecklist({ env: ENV, repoRoot: REPO, declared }), 'GeoServer writes');
    expect(item.ok).toBe(false);
    expect(item.detail).toContain('GeoServer shares geodata-geo with api');
  });

  it('lax login limits fail', async () => {
    const items = await runChecklist({ env: { ...ENV, IDENTITY_LOGIN_LIMIT_PER_ACCOUNT: '1000' }, ...good() });
    expect(byName(items, 'rate limiting')).toMatchObject({ ok: false });
    expect(byName(items, 'rate limiting').detail).toContain('too lax');
  });

  it('a CORS origin outside the parent domain fails, naming it', async () => {
    expect(byName(await runChecklist({ env: ENV, ...good() }), 'CORS').ok).toBe(true);
    const configDir = mkdtempSync(join(tmpdir(), 'cors-'));
    cpSync(CONFIG_DIR, configDir, { recursive: true });
    const widened = readFileSync(join(CONFIG_DIR, 'hydra.yml'), 'utf8').replace('        - https://*.${IDENTITY_PARENT_DOMAIN}\n', '        - https://*.${IDENTITY_PARENT_DOMAIN}\n        - https://evil.example.com\n');
    writeFileSync(join(configDir, 'hydra.yml'), widened);
    const item = byName(await runChecklist({ env: ENV, ...good(), configDir }), 'CORS');
    expect(item).toEqual({ name: 'CORS restricted to own domains', ok: false, detail: 'foreign or open origins: hydra public: https://evil.example.com' });
  });

  it('a declared hydra.yml with a foreign CORS origin fails, naming it', async () => {
    const declared = broken((stack) => {
      const upload = (stack.containers.find((c) => c.name === 'hydra') as DeclaredContainer).uploads.find((u) => u.file === '/etc/config/hydra/hydra.yml');
      if (!upload) throw new Error('hydra has no hydra.yml upload');
      upload.content = upload.content.replace('- https://*.example.org', '- https://*.example.org\n        - https://evil.example.com');
    });
    expect(byName(await runChecklist({ env: ENV, repoRoot: REPO, declared }), 'CORS')).toEqual({
      name: 'CORS restricted to own domains',
      ok: false,
      detail: 'foreign or open origins: hydra (declared) public: https://evil.example.com',
    });
  });

  it('SMTP: sends a real test mail to a local SMTP server, and fails naming only the host when it cannot', async () => {
    const received: string[] = [];
    const server = new SMTPServer({
      authOptional: true,
      disabledCommands: ['STARTTLS'],
      onData(stream, _session, callback) {
        let data = '';
        stream.on('data', (chunk: Buffer) => (data += chunk.toString('utf8')));
        stream.on('end', () => {
          received.push(data);
          callback();
        });
      },
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.server.address() as { port: number }).port;
    try {
      const env = { ...ENV, KRATOS_SMTP_URI: `smtp://127.0.0.1:${port}/?ignoreTLS=true` };
      const ok = byName(await runChecklist({ env, ...good(), testMailTo: 'ops@example.org' }), 'SMTP');
      expect(ok).toMatchObject({ ok: true });
      expect(received).toHaveLength(1);
      expect(received[0]).toContain('Subject: Production checklist test mail');
      const down = byName(await runChecklist({ env: { ...ENV, KRATOS_SMTP_URI: 'smtp://relay-user:relay-pass@127.0.0.1:9/' }, ...good(), testMailTo: 'ops@example.org' }), 'SMTP');
      expect(down.ok).toBe(false);
      expect(down.detail).toMatch(/^127\.0\.0\.1: /);
      expect(down.detail).not.toContain('relay-pass');
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it('TLS --live: passes with a trusted certificate and fails on an untrusted one', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tls-'));
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'), '-days', '30', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost'], { stdio: 'ignore' });
    const cert = readFileSync(join(dir, 'cert.pem'), 'utf8');
    const server = createTlsServer({ key: readFileSync(join(dir, 'key.pem')), cert }, (socket) => socket.end());
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as { port: number }).port;
    const env = { ...ENV, IDENTITY_AUTH_URL: 'https://localhost', KRATOS_PUBLIC_URL: 'https://localhost/kratos', HYDRA_PUBLIC_URL: 'https://localhost/' };
    try {
      const trusted = byName(await runChecklist({ env, ...good(), live: true, tlsCa: cert, tlsPort: port }), 'TLS');
      expect(trusted).toMatchObject({ ok: true, detail: 'valid certificates for localhost' });
      const untrusted = byName(await runChecklist({ env, ...good(), live: true, tlsPort: port }), 'TLS');
      expect(untrusted.ok).toBe(false);
      expect(untrusted.detail).toMatch(/^localhost: .*self[- ]signed/i);
    } finally {
      server.close();
    }
  });

  it('the command exits 1 and prints PASS/FAIL per item', { timeout: 120_000 }, async () => {
    const failure = await run(process.execPath, ['--import', 'tsx', join(import.meta.dirname, '../src/prod-check/cli.ts')], { env: { ...process.env, ...ENV } }).then(
      () => undefined,
      (error: { code: number; stdout: string }) => error,
    );
    expect(failure?.code).toBe(1);
    expect(failure?.stdout).toMatch(/^PASS {2}Hydra system secret/m);
    expect(failure?.stdout).toMatch(/^FAIL {2}TLS certificates for every auth domain — not verified/m);
    expect(failure?.stdout).toMatch(/^PASS {2}database backup job present/m);
    expect(failure?.stdout).toMatch(/11 items: 9 passed, 2 failed/);
  });
});
