import { execFile, execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer as createTlsServer } from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { SMTPServer } from 'smtp-server';
import { describe, expect, it } from 'vitest';
import { CONFIG_DIR } from '../../services/shared/identity-config/render.js';
import { runChecklist, type ChecklistItem } from '../src/prod-check/checklist.js';
import { VALID_ENV } from './fixtures.js';

/** The production checklist: every item passes and fails for the reason it names. */

const run = promisify(execFile);
const ENV = { ...VALID_ENV, IDENTITY_COOKIE_SECRET: 'c'.repeat(40) };

function fakeRepo(files: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), 'prod-check-'));
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(join(root, path, '..'), { recursive: true });
    writeFileSync(join(root, path), content);
  }
  return root;
}

const GOOD_INFRA = {
  'infra/jobs/backup.sh': '#!/bin/sh\nPGPASSWORD=$password pg_dump --dbname "$db"\n',
  'infra/stack.ts': "const backup = upload('infra/jobs/backup.sh');\nnew Network('admin', { internal: true });\nports: [{ internal: 443, external: 443 }]\nenvs: { HYDRA_DB_PASSWORD: secrets.hydraDbPassword }\n",
  'infra/caddy.ts': "const guarded = ['/admin*'];\nlines.push('respond @outside \"Forbidden\" 403');\n",
};

function byName(items: ChecklistItem[], fragment: string): ChecklistItem {
  const found = items.find((i) => i.name.includes(fragment));
  if (!found) throw new Error(`no item ${fragment}`);
  return found;
}

describe('production checklist', () => {
  it('prints all eight items of the seed list', async () => {
    const items = await runChecklist({ env: ENV, repoRoot: fakeRepo(GOOD_INFRA) });
    expect(items.map((i) => i.name)).toEqual([
      'Hydra system secret ≥ 32 characters',
      'database passwords outside the stack and compose files',
      'TLS certificates for every auth domain',
      'admin APIs (Kratos 4434, Hydra 4445) internal only',
      'login rate limiting on',
      'CORS restricted to own domains',
      'SMTP reachable and a test mail sent',
      'database backup job present',
    ]);
    expect(items.filter((i) => i.ok).map((i) => i.name)).toEqual([
      'Hydra system secret ≥ 32 characters',
      'database passwords outside the stack and compose files',
      'admin APIs (Kratos 4434, Hydra 4445) internal only',
      'login rate limiting on',
      'CORS restricted to own domains',
      'database backup job present',
    ]);
    expect(byName(items, 'TLS').detail).toContain('not verified: run with --live');
    expect(byName(items, 'SMTP').detail).toContain('not verified: run with --send-test-mail');
  });

  it('without infra/ the deployment items fail honestly, with the reason', async () => {
    const items = await runChecklist({ env: ENV, repoRoot: fakeRepo({}) });
    expect(byName(items, 'backup')).toEqual({ name: 'database backup job present', ok: false, detail: 'infra/ does not exist yet: no backup job' });
    expect(byName(items, 'admin APIs').detail).toContain('infra/ does not exist yet');
    expect(byName(items, 'passwords').ok).toBe(false);
  });

  it('a short system secret fails naming secrets.system[0]', async () => {
    const items = await runChecklist({ env: { ...ENV, HYDRA_SECRETS_SYSTEM: 'x'.repeat(20) }, repoRoot: fakeRepo(GOOD_INFRA) });
    expect(byName(items, 'system secret')).toMatchObject({ ok: false, detail: 'secrets.system[0] must be at least 32 characters, has 20' });
  });

  it('a literal database password in a compose file fails with file and line, never the value', async () => {
    const repo = fakeRepo({ ...GOOD_INFRA, 'docker-compose.yml': 'services:\n  kratos:\n    environment:\n      DSN: postgres://kratos:hunter2hunter2@db/kratos\n' });
    const item = byName(await runChecklist({ env: ENV, repoRoot: repo }), 'passwords');
    expect(item).toMatchObject({ ok: false, detail: 'literal password at docker-compose.yml:4' });
    expect(item.detail).not.toContain('hunter2');
  });

  it('a published admin port fails the admin item; so does a missing /admin 403 rule', async () => {
    const published = fakeRepo({ ...GOOD_INFRA, 'infra/stack.ts': `${GOOD_INFRA['infra/stack.ts']}ports: [{ internal: 4445, external: 4445 }]\n` });
    expect(byName(await runChecklist({ env: ENV, repoRoot: published }), 'admin APIs').detail).toContain('publishes an admin port');
    const unguarded = fakeRepo({ ...GOOD_INFRA, 'infra/caddy.ts': 'reverse_proxy hydra:4444\n' });
    expect(byName(await runChecklist({ env: ENV, repoRoot: unguarded }), 'admin APIs').detail).toContain('no proxy rule answering 403 to /admin');
  });

  it('a backup script nobody runs fails', async () => {
    const repo = fakeRepo({ ...GOOD_INFRA, 'infra/stack.ts': 'new Network("admin")\n' });
    expect(byName(await runChecklist({ env: ENV, repoRoot: repo }), 'backup')).toMatchObject({ ok: false, detail: 'infra/jobs/backup.sh exists but nothing in infra/ runs it' });
  });

  it('lax login limits fail', async () => {
    const items = await runChecklist({ env: { ...ENV, IDENTITY_LOGIN_LIMIT_PER_ACCOUNT: '1000' }, repoRoot: fakeRepo(GOOD_INFRA) });
    expect(byName(items, 'rate limiting')).toMatchObject({ ok: false });
    expect(byName(items, 'rate limiting').detail).toContain('too lax');
  });

  it('a CORS origin outside the parent domain fails, naming it', async () => {
    expect(byName(await runChecklist({ env: ENV, repoRoot: fakeRepo(GOOD_INFRA) }), 'CORS').ok).toBe(true);
    const configDir = mkdtempSync(join(tmpdir(), 'cors-'));
    cpSync(CONFIG_DIR, configDir, { recursive: true });
    const widened = readFileSync(join(CONFIG_DIR, 'hydra.yml'), 'utf8').replace('        - https://*.${IDENTITY_PARENT_DOMAIN}\n', '        - https://*.${IDENTITY_PARENT_DOMAIN}\n        - https://evil.example.com\n');
    writeFileSync(join(configDir, 'hydra.yml'), widened);
    const item = byName(await runChecklist({ env: ENV, repoRoot: fakeRepo(GOOD_INFRA), configDir }), 'CORS');
    expect(item).toEqual({ name: 'CORS restricted to own domains', ok: false, detail: 'foreign or open origins: hydra public: https://evil.example.com' });
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
      const ok = byName(await runChecklist({ env, repoRoot: fakeRepo(GOOD_INFRA), testMailTo: 'ops@example.org' }), 'SMTP');
      expect(ok).toMatchObject({ ok: true });
      expect(received).toHaveLength(1);
      expect(received[0]).toContain('Subject: Production checklist test mail');
      const down = byName(await runChecklist({ env: { ...ENV, KRATOS_SMTP_URI: 'smtp://relay-user:relay-pass@127.0.0.1:9/' }, repoRoot: fakeRepo(GOOD_INFRA), testMailTo: 'ops@example.org' }), 'SMTP');
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
      const trusted = byName(await runChecklist({ env, repoRoot: fakeRepo(GOOD_INFRA), live: true, tlsCa: cert, tlsPort: port }), 'TLS');
      expect(trusted).toMatchObject({ ok: true, detail: 'valid certificates for localhost' });
      const untrusted = byName(await runChecklist({ env, repoRoot: fakeRepo(GOOD_INFRA), live: true, tlsPort: port }), 'TLS');
      expect(untrusted.ok).toBe(false);
      expect(untrusted.detail).toMatch(/^localhost: .*self[- ]signed/i);
    } finally {
      server.close();
    }
  });

  it('the command exits 1 and prints PASS/FAIL per item', async () => {
    const failure = await run(process.execPath, ['--import', 'tsx', join(import.meta.dirname, '../src/prod-check/cli.ts')], { env: { ...process.env, ...ENV } }).then(
      () => undefined,
      (error: { code: number; stdout: string }) => error,
    );
    expect(failure?.code).toBe(1);
    expect(failure?.stdout).toMatch(/^PASS {2}Hydra system secret/m);
    expect(failure?.stdout).toMatch(/^FAIL {2}TLS certificates for every auth domain — not verified/m);
    expect(failure?.stdout).toMatch(/8 items: \d passed, \d failed/);
  });
});
