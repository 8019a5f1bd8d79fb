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
import { CONFIG_DIR } from '../src/config/config-dir.js';
import { runChecklist, type ChecklistItem } from '../src/prod-check/checklist.js';

/**
 * The production checklist: every item reads the declared stack only (never the shell environment), the
 * example stack passes every item, and a stack broken in one way fails the item about it, for the
 * reason it names.
 */

const run = promisify(execFile);
/** What an operator's shell might hold: none of it may change a verdict. */
const HOSTILE_SHELL = {
  HYDRA_SECRETS_SYSTEM: 'short',
  IDENTITY_LOGIN_LIMIT_PER_IP: '100000',
  KRATOS_ADMIN_URL: 'https://id.example.org/admin',
  IDENTITY_AUTH_URL: 'http://auth.example.org',
  IDENTITY_PARENT_DOMAIN: 'evil.example.com',
  IDENTITY_DEV_MODE: 'true',
};

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
  it('prints the eight items of the seed list, the container limits and the two about branch sites; the example stack passes every item', async () => {
    const items = await runChecklist({ ...good() });
    expect(items.map((i) => i.name)).toEqual([
      'Hydra system secret ≥ 32 characters',
      'database passwords outside the stack and compose files',
      'TLS certificates for every auth domain',
      'admin APIs (Kratos 4434, Hydra 4445) internal only',
      'login rate limiting on',
      'every container within memory, CPU and process limits',
      'CORS restricted to own domains',
      'SMTP relay declared, and a test mail sent when asked',
      'database backup job present',
      'preview sites outside the session cookie domain',
      'branch sites isolated from databases, GeoServer and Ory',
      'GeoServer writes tied to platform users',
    ]);
    expect(items.filter((i) => !i.ok)).toEqual([]);
    expect(byName(items, 'TLS').detail).toContain('not probed: --live connects to each');
    expect(byName(items, 'SMTP').detail).toContain('not sent: --send-test-mail <address> sends one');
  });

  it('without infra/ every item fails honestly, with the reason', async () => {
    const empty = mkdtempSync(join(tmpdir(), 'prod-check-'));
    const items = await runChecklist({ repoRoot: empty });
    expect(items.filter((i) => i.ok)).toEqual([]);
    for (const entry of items) expect(entry.detail, entry.name).toContain('infra/ does not exist yet');
  });

  it('a Hydra system secret generated with 20 characters, or not handed to Hydra, fails the system secret item', async () => {
    const short = broken((stack) => ((stack.secrets?.find((s) => s.name === 'hydraSystemSecret') as { length: number }).length = 20));
    expect(byName(await runChecklist({ repoRoot: REPO, declared: short }), 'system secret')).toMatchObject({ ok: false, detail: 'hydraSystemSecret is generated with 20 characters, fewer than 32' });
    const missing = broken((stack) => delete (stack.containers.find((c) => c.name === 'hydra') as DeclaredContainer).env.SECRETS_SYSTEM);
    expect(byName(await runChecklist({ repoRoot: REPO, declared: missing }), 'system secret')).toMatchObject({ ok: false, detail: 'hydra receives no SECRETS_SYSTEM' });
    const encrypted = broken((stack) => (stack.secrets = stack.secrets?.map((s) => (s.name === 'hydraSystemSecret' ? { name: s.name, source: 'stack file' } : s))));
    expect(byName(await runChecklist({ repoRoot: REPO, declared: encrypted }), 'system secret')).toMatchObject({ ok: true, detail: 'set encrypted in the stack file; pulumi preview refuses one under 32 characters' });
  });

  it('a container given a database password outside a Pulumi secret fails, naming the container and variable', async () => {
    const declared = broken((stack) => {
      const api = stack.containers.find((c) => c.name === 'api') as DeclaredContainer;
      api.envIsSecret = false;
    });
    expect(byName(await runChecklist({ repoRoot: REPO, declared }), 'passwords')).toMatchObject({ ok: false, detail: 'api receives DATABASE_URL outside a Pulumi secret' });
  });

  it('a secret in plain text in the stack file fails the passwords item, naming the key', async () => {
    const declared = broken((stack) => stack.secrets?.push({ name: 'kratosDbPassword', source: 'plain text in the stack file' }));
    expect(byName(await runChecklist({ repoRoot: REPO, declared }), 'passwords')).toMatchObject({ ok: false, detail: 'kratosDbPassword is in plain text in the stack file (pulumi config set --secret kratosDbPassword …)' });
  });

  it('a published admin port fails the admin item', async () => {
    const declared = broken((stack) => (stack.containers.find((c) => c.name === 'hydra') as DeclaredContainer).ports.push({ internal: 4445, external: 4445, protocol: 'tcp' }));
    expect(byName(await runChecklist({ repoRoot: REPO, declared }), 'admin APIs')).toMatchObject({ ok: false, detail: 'hydra publishes admin port 4445 on the host (as 4445)' });
  });

  it('a login container that reaches Hydra\'s admin API through the public domain fails the admin item', async () => {
    const declared = broken((stack) => ((stack.containers.find((c) => c.name === 'login') as DeclaredContainer).env.HYDRA_ADMIN_URL = 'https://oauth.example.org/admin'));
    expect(byName(await runChecklist({ repoRoot: REPO, declared }), 'admin APIs')).toMatchObject({ ok: false, detail: 'login\'s HYDRA_ADMIN_URL points at a public host (oauth.example.org)' });
  });

  it('a site without the /admin 403 rule fails the admin item, naming the site', async () => {
    const declared = broken((stack) => {
      const lines = stack.caddyfile.split('\n');
      const site = lines.indexOf('api.example.org {');
      const respond = lines.findIndex((l, i) => i > site && l.includes('respond @outside_internal_range'));
      lines.splice(respond, 1);
      stack.caddyfile = lines.join('\n');
    });
    expect(byName(await runChecklist({ repoRoot: REPO, declared }), 'admin APIs')).toMatchObject({
      ok: false,
      detail: 'the proxy does not answer 403 to /admin from outside the internal ranges on api.example.org',
    });
  });

  it('a stack without the backup service fails the backup item', async () => {
    const declared = broken((stack) => (stack.containers = stack.containers.filter((c) => c.name !== 'backup')));
    expect(byName(await runChecklist({ repoRoot: REPO, declared }), 'backup')).toMatchObject({ ok: false, detail: 'no service runs a pg_dump backup script' });
    const partial = broken((stack) => {
      const backup = stack.containers.find((c) => c.name === 'backup') as DeclaredContainer;
      backup.env.BACKUP_DATABASES = 'features=features-db:5432:features:postgres';
    });
    expect(byName(await runChecklist({ repoRoot: REPO, declared: partial }), 'backup').detail).toBe(
      'the kratos database is not in any backup (BACKUP_DATABASES of backup); the hydra database is not in any backup (BACKUP_DATABASES of backup)',
    );
  });

  it('a stack file with a preview site under the cookie domain fails: the program refuses it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'prod-check-preview-'));
    const targets = join(dir, 'targets.yaml');
    writeFileSync(targets, readFileSync(join(REPO, 'config', 'targets.yaml'), 'utf8').replace('de1.example-preview.net', 'de1.sites.example.org'));
    const stackFile = join(dir, 'Pulumi.prod.yaml');
    writeFileSync(stackFile, `${readFileSync(join(REPO, 'infra', 'Pulumi.example.yaml'), 'utf8')}  geodata-platform:targetsFile: ${targets}\n`.replace(/^ {2}geodata-platform:targetsFile: config\/targets\.yaml.*$/m, ''));
    const item = byName(await runChecklist({ repoRoot: REPO, stackFile }), 'preview');
    expect(item.ok).toBe(false);
    expect(item.detail).toContain('the preview site feature/team-de1 (de1.sites.example.org) lies within the session cookie domain example.org');
  }, 120_000);

  it('a preview site allowed as a CORS origin fails, naming the container', async () => {
    const declared = broken((stack) => {
      const api = stack.containers.find((c) => c.name === 'api') as DeclaredContainer;
      api.env.CORS_ORIGINS = `${api.env.CORS_ORIGINS},https://de1.example-preview.net`;
    });
    expect(byName(await runChecklist({ repoRoot: REPO, declared }), 'preview')).toMatchObject({ ok: false, detail: 'api allows the preview site de1.example-preview.net as a CORS origin' });
  });

  /** The isolation item's problems for a declared stack. */
  async function isolation(declared: DeclaredResult): Promise<string[]> {
    const item = byName(await runChecklist({ repoRoot: REPO, declared }), 'isolated');
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
    const item = byName(await runChecklist({ repoRoot: REPO, declared: stripped }), 'GeoServer writes');
    expect(item.ok).toBe(false);
    expect(item.detail).toMatch(/geo\.example\.org lets clients send X-Geodata-User/);
    const unasked = broken((stack) => (stack.caddyfile = stack.caddyfile.replace(/forward_auth @write/, 'reverse_proxy @write')));
    expect(byName(await runChecklist({ repoRoot: REPO, declared: unasked }), 'GeoServer writes').detail).toContain('without asking the API');
  });

  it('another container on GeoServer\'s network fails the GeoServer item: it could send the identity headers', async () => {
    const declared = broken((stack) => (stack.containers.find((c) => c.name === 'api') as DeclaredContainer).networks.push({ name: 'geodata-geo', aliases: [] }));
    const item = byName(await runChecklist({ repoRoot: REPO, declared }), 'GeoServer writes');
    expect(item.ok).toBe(false);
    expect(item.detail).toContain('GeoServer shares geodata-geo with api');
  });

  const login = (stack: DeclaredStack): DeclaredContainer => stack.containers.find((c) => c.name === 'login') as DeclaredContainer;

  it('a login container whose rate limits were set to 100000 fails the rate limiting item, naming each variable', async () => {
    const declared = broken((stack) => Object.assign(login(stack).env, { IDENTITY_LOGIN_LIMIT_PER_IP: '100000', IDENTITY_LOGIN_LIMIT_PER_ACCOUNT: '100000', IDENTITY_LOGIN_LIMIT_WINDOW_SECONDS: '1' }));
    expect(byName(await runChecklist({ repoRoot: REPO, declared }), 'rate limiting')).toMatchObject({
      ok: false,
      detail:
        'IDENTITY_LOGIN_LIMIT_PER_ACCOUNT=100000 is too lax (at most 20 failed attempts per account); IDENTITY_LOGIN_LIMIT_PER_IP=100000 is too lax (at most 300 attempts per IP); IDENTITY_LOGIN_LIMIT_WINDOW_SECONDS=1 is too short (at least 60)',
    });
    const spoofable = broken((stack) => (login(stack).env.IDENTITY_TRUST_PROXY = 'true'));
    expect(byName(await runChecklist({ repoRoot: REPO, declared: spoofable }), 'rate limiting').detail).toBe('IDENTITY_TRUST_PROXY=true trusts any X-Forwarded-For: a client chooses its own per-IP bucket');
  });

  it('a login container told it runs as three replicas without LOGIN_DATABASE_URL fails the rate limiting item, naming the variable', async () => {
    expect(byName(await runChecklist(good()), 'rate limiting').detail).toContain('counted in PostgreSQL (LOGIN_DATABASE_URL), one budget for every replica');
    const inMemory = broken((stack) => {
      delete login(stack).env.LOGIN_DATABASE_URL;
      login(stack).env.IDENTITY_REPLICAS = '3';
    });
    const item = byName(await runChecklist({ repoRoot: REPO, declared: inMemory }), 'rate limiting');
    expect(item.ok).toBe(false);
    expect(item.detail).toContain('LOGIN_DATABASE_URL: required when IDENTITY_REPLICAS is 3');
  });

  it('a proxy that passes Kratos\' self-service submissions straight to Kratos fails the rate limiting item', async () => {
    expect(STACK.caddyfile).toContain('\troute @gated {\n\t\trewrite * /kratos-gate{uri}\n\t\treverse_proxy login:3000\n\t}');
    const straight = broken((stack) => (stack.caddyfile = stack.caddyfile.replace('rewrite * /kratos-gate{uri}\n\t\treverse_proxy login:3000', 'reverse_proxy kratos:4433')));
    expect(byName(await runChecklist({ repoRoot: REPO, declared: straight }), 'rate limiting')).toMatchObject({
      ok: false,
      detail: 'id.example.org passes Kratos\' self-service submissions (POST /self-service/*) to Kratos without the login app\'s limiters',
    });
    const loginOnly = broken((stack) => (stack.caddyfile = stack.caddyfile.replace('\t\tpath /self-service/*\n', '\t\tpath /self-service/login*\n')));
    expect(byName(await runChecklist({ repoRoot: REPO, declared: loginOnly }), 'rate limiting').ok).toBe(false);
  });

  it('a login container whose memory, CPU and process limits were set to 100000 fails the limits item, naming each', async () => {
    const declared = broken((stack) => (login(stack).limits = { memoryMb: 100_000, memorySwapMb: 100_000, cpus: 100_000, processes: 100_000 }));
    expect(byName(await runChecklist({ repoRoot: REPO, declared }), 'limits')).toMatchObject({
      ok: false,
      detail: 'login\'s memory limit 100000 MiB is over 16384 MiB; login\'s CPU limit 100000 is over 8 cores; login\'s processes limit 100000 is not within 1–4096',
    });
    const unlimited = broken((stack) => (login(stack).limits = {}));
    expect(byName(await runChecklist({ repoRoot: REPO, declared: unlimited }), 'limits').detail).toBe('login has no memory limit; login has no CPU limit');
    const swapping = broken((stack) => (login(stack).limits = { memoryMb: 2048, memorySwapMb: -1, cpus: 2 }));
    expect(byName(await runChecklist({ repoRoot: REPO, declared: swapping }), 'limits').detail).toBe('login may swap (memory_swap -1 MiB, memory 2048 MiB)');
  });

  it('an API allowing a foreign CORS origin fails the CORS item, naming it', async () => {
    const declared = broken((stack) => ((stack.containers.find((c) => c.name === 'api') as DeclaredContainer).env.CORS_ORIGINS += ',http://evil.example.com'));
    expect(byName(await runChecklist({ repoRoot: REPO, declared }), 'CORS')).toMatchObject({ ok: false, detail: 'foreign or open origins: api CORS_ORIGINS: http://evil.example.com' });
  });

  it('a declared hydra.yml with a foreign CORS origin fails, naming it', async () => {
    const declared = broken((stack) => {
      const upload = (stack.containers.find((c) => c.name === 'hydra') as DeclaredContainer).uploads.find((u) => u.file === '/etc/config/hydra/hydra.yml');
      if (!upload) throw new Error('hydra has no hydra.yml upload');
      upload.content = upload.content.replace('- https://*.example.org', '- https://*.example.org\n        - https://evil.example.com');
    });
    expect(byName(await runChecklist({ repoRoot: REPO, declared }), 'CORS')).toEqual({
      name: 'CORS restricted to own domains',
      ok: false,
      detail: 'foreign or open origins: hydra public: https://evil.example.com',
    });
  });

  it('a Kratos without an SMTP relay, or given it outside a Pulumi secret, fails the SMTP item', async () => {
    const kratos = (stack: DeclaredStack) => stack.containers.find((c) => c.name === 'kratos') as DeclaredContainer;
    const none = broken((stack) => delete kratos(stack).env.COURIER_SMTP_CONNECTION_URI);
    expect(byName(await runChecklist({ repoRoot: REPO, declared: none }), 'SMTP')).toMatchObject({ ok: false, detail: 'kratos receives no COURIER_SMTP_CONNECTION_URI: no mail leaves' });
    const plain = broken((stack) => (kratos(stack).envIsSecret = false));
    expect(byName(await runChecklist({ repoRoot: REPO, declared: plain }), 'SMTP').detail).toBe('kratos receives COURIER_SMTP_CONNECTION_URI (with the relay\'s password) outside a Pulumi secret');
  });

  it('SMTP --send-test-mail: sends a real test mail to a local SMTP server, and fails naming only the host when it cannot or has no URI', async () => {
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
      const ok = byName(await runChecklist({ ...good(), testMailTo: 'ops@example.org', smtpUri: `smtp://127.0.0.1:${port}/?ignoreTLS=true` }), 'SMTP');
      expect(ok).toMatchObject({ ok: true });
      expect(received).toHaveLength(1);
      expect(received[0]).toContain('Subject: Production checklist test mail');
      expect(received[0]).toContain('From: noreply@example.org');
      const down = byName(await runChecklist({ ...good(), testMailTo: 'ops@example.org', smtpUri: 'smtp://relay-user:relay-pass@127.0.0.1:9/' }), 'SMTP');
      expect(down.ok).toBe(false);
      expect(down.detail).toMatch(/^127\.0\.0\.1: /);
      expect(down.detail).not.toContain('relay-pass');
      const unread = byName(await runChecklist({ ...good(), testMailTo: 'ops@example.org' }), 'SMTP');
      expect(unread).toMatchObject({ ok: false, detail: 'no test mail sent: smtpConnectionUri could not be read from the stack (pulumi config get smtpConnectionUri)' });
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it('an auth domain served with the proxy\'s own CA, or a login URL over plain http, fails the TLS item', async () => {
    const internal = broken((stack) => (stack.caddyfile = stack.caddyfile.replace('auth.example.org {\n', 'auth.example.org {\n\ttls internal\n')));
    expect(byName(await runChecklist({ repoRoot: REPO, declared: internal }), 'TLS')).toMatchObject({ ok: false, detail: 'auth.example.org gets a certificate from the proxy\'s own CA (tls internal)' });
    const plain = broken((stack) => (login(stack).env.IDENTITY_AUTH_URL = 'http://auth.example.org'));
    expect(byName(await runChecklist({ repoRoot: REPO, declared: plain }), 'TLS')).toMatchObject({ ok: false, detail: 'login IDENTITY_AUTH_URL is not https (http://auth.example.org)' });
  });

  it('TLS --live: passes with a trusted certificate and fails on an untrusted one', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tls-'));
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'), '-days', '30', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost'], { stdio: 'ignore' });
    const cert = readFileSync(join(dir, 'cert.pem'), 'utf8');
    const server = createTlsServer({ key: readFileSync(join(dir, 'key.pem')), cert }, (socket) => socket.end());
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as { port: number }).port;
    // The stack as it would be declared with every auth domain on this host.
    const rehost = (_key: string, value: unknown) => (typeof value === 'string' ? value.replace(/\b(auth|id|oauth|accounts)\.example\.org\b/g, 'localhost') : value);
    const declared: DeclaredResult = { ok: true, stack: JSON.parse(JSON.stringify(STACK), rehost) as DeclaredStack };
    try {
      const trusted = byName(await runChecklist({ repoRoot: REPO, declared, live: true, tlsCa: cert, tlsPort: port }), 'TLS');
      expect(trusted).toMatchObject({ ok: true, detail: 'valid certificates for localhost' });
      const untrusted = byName(await runChecklist({ repoRoot: REPO, declared, live: true, tlsPort: port }), 'TLS');
      expect(untrusted.ok).toBe(false);
      expect(untrusted.detail).toMatch(/^localhost: .*self[- ]signed/i);
    } finally {
      server.close();
    }
  });

  it('a social sign-in provider without a client secret adds a failing item, naming the provider', async () => {
    const providers = (secret?: string) =>
      broken((stack) => {
        const kratos = stack.containers.find((c) => c.name === 'kratos') as DeclaredContainer;
        kratos.env.SELFSERVICE_METHODS_OIDC_CONFIG_PROVIDERS = JSON.stringify([{ id: 'keycloak', provider: 'generic', client_id: 'geodata', issuer_url: 'https://sso.example.org/realms/x', ...(secret ? { client_secret: secret } : {}) }]);
      });
    expect(byName(await runChecklist({ repoRoot: REPO, declared: providers() }), 'social sign-in')).toEqual({ name: 'social sign-in providers have client secrets', ok: false, detail: 'the social sign-in provider keycloak has no client secret' });
    expect(byName(await runChecklist({ repoRoot: REPO, declared: providers('s3cret-from-the-stack') }), 'social sign-in').ok).toBe(true);
    expect((await runChecklist({ ...good() })).some((i) => i.name.includes('social sign-in'))).toBe(false);
  });

  it('Kratos run with --dev adds a failing dev-mode item', async () => {
    const declared = broken((stack) => (stack.containers.find((c) => c.name === 'kratos') as DeclaredContainer).command.push('--dev'));
    expect(byName(await runChecklist({ repoRoot: REPO, declared }), 'dev mode')).toEqual({ name: 'not in dev mode', ok: false, detail: 'kratos runs with --dev' });
  });

  const cli = join(import.meta.dirname, '../src/prod-check/cli.ts');
  const runCli = (args: string[]) =>
    run(process.execPath, ['--import', 'tsx', cli, ...args], { cwd: REPO, env: { ...process.env, ...HOSTILE_SHELL } }).then(
      (done) => ({ code: 0, ...done }),
      (error: { code: number; stdout: string; stderr: string }) => error,
    );

  it('the command passes every item on the example stack whatever the shell holds, and exits 0', { timeout: 120_000 }, async () => {
    const result = await runCli(['--stack-file', 'infra/Pulumi.example.yaml']);
    expect(result.stdout).toMatch(/^PASS {2}Hydra system secret/m);
    expect(result.stdout).toMatch(/^PASS {2}login rate limiting on — 30 attempts per IP/m);
    expect(result.stdout).not.toMatch(/^FAIL/m);
    expect(result.stdout).toMatch(/12 items: 12 passed, 0 failed/);
    expect(result.code).toBe(0);
  });

  it('the command exits 1 on a stack file with the SMTP URI in plain text and a foreign CORS origin in its identity config, naming both (its encrypted Hydra secret passes)', { timeout: 120_000 }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'prod-check-broken-'));
    const configDir = join(dir, 'identity-config');
    cpSync(CONFIG_DIR, configDir, { recursive: true });
    const hydraYml = readFileSync(join(CONFIG_DIR, 'hydra.yml'), 'utf8');
    const widened = hydraYml.replace('        - https://*.${IDENTITY_PARENT_DOMAIN}\n', '        - https://*.${IDENTITY_PARENT_DOMAIN}\n        - https://evil.example.com\n');
    expect(widened).not.toBe(hydraYml);
    writeFileSync(join(configDir, 'hydra.yml'), widened);
    const stackFile = join(dir, 'Pulumi.prod.yaml');
    const example = readFileSync(join(REPO, 'infra', 'Pulumi.example.yaml'), 'utf8').replace(/^ {2}geodata-platform:identityConfigDir: .*$/m, `  geodata-platform:identityConfigDir: ${configDir}`);
    // An encrypted secret (never decrypted) is the operator's, not one the program generates.
    writeFileSync(stackFile, `${example}  geodata-platform:smtpConnectionUri: smtps://mailer:hunter2@smtp.example.org:465/\n  geodata-platform:hydraSystemSecret:\n    secure: v1:AAAAAAAAAAAAAAAAAAAAAAAA\n`);
    const result = await runCli(['--stack-file', stackFile]);
    expect(result.code, result.stderr).toBe(1);
    expect(result.stdout).toMatch(/^FAIL {2}CORS restricted to own domains — foreign or open origins: hydra public: https:\/\/evil\.example\.com$/m);
    expect(result.stdout).toMatch(/^FAIL {2}database passwords outside the stack and compose files — smtpConnectionUri is in plain text in the stack file/m);
    expect(result.stdout).toMatch(/^FAIL {2}SMTP relay declared, and a test mail sent when asked — smtpConnectionUri is in plain text in the stack file/m);
    expect(result.stdout).toMatch(/^PASS {2}Hydra system secret ≥ 32 characters — set encrypted in the stack file/m);
    expect(result.stdout).toMatch(/12 items: 9 passed, 3 failed/);
    expect(result.stdout).not.toContain('hunter2');
  });

  it('the command exits 2 on an unknown option', async () => {
    const result = await runCli(['--stack', 'prod']);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/usage: identity:prod-check/);
  });
});
