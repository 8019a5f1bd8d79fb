import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as pulumi from '@pulumi/pulumi';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadTargets } from '../../services/shared/targets.js';
import { parse as parseYaml } from 'yaml';
import { isPreviewTarget } from '../config.js';
import { isPinnedImage } from '../images.js';
import { declareDockerUnderMocks, envVariables, isSecretEnvelope, plainStrings, resolved, reveal, type RegisteredResource } from '../testing/pulumi-mocks.js';

/**
 * The Pulumi program under the runtime mocks, checked like a policy: the tests read every resource
 * the program registers (with the inputs the engine would receive) and state rules the stack must
 * obey. No Pulumi CLI or Docker engine is needed.
 */

const CONTAINER = 'docker:index/container:Container';
const JOB_DURATION_MS = 150;
// Operator-set secrets carry markers that must never appear outside a secret envelope.
const GIVEN_SECRETS = {
  webhookSecrets: JSON.stringify({ SECRET_MAIN: 'MARK-webhook-main-current', SECRET_MAIN_PREVIOUS: 'MARK-webhook-main-previous', UNRELATED_PREVIOUS: 'MARK-not-for-webhook' }),
  smtpConnectionUri: 'smtps://mailer:MARK-smtp-7c1d@smtp.example.org:465/',
  geoserverAdminPassword: 'MARK-geoserver-admin-51ab',
  kratosCipherSecret: 'MARK-cipher-000000000000000000000'.slice(0, 32),
};

let registered: RegisteredResource[];
let program: typeof import('../program.js');
let workDir: string;

const containers = () => registered.filter((r) => r.type === CONTAINER);
const container = (name: string) => {
  const found = containers().find((c) => c.name === name);
  if (!found) throw new Error(`no container ${name}; have ${containers().map((c) => c.name).join(', ')}`);
  return found;
};
const isJob = (c: RegisteredResource) => c.inputs.attach === true;
const envOf = (c: RegisteredResource) => envVariables(c.inputs.envs);
const labelsOf = (c: RegisteredResource): Record<string, string> =>
  Object.fromEntries(((reveal(c.inputs.labels) as { label: string; value: string }[] | undefined) ?? []).map((l) => [l.label, l.value]));
const networksOf = (c: RegisteredResource) => (reveal(c.inputs.networksAdvanced) as { name: string; ipv4Address?: string; aliases?: string[] }[]) ?? [];

beforeAll(async () => {
  ({ registered, program } = await declareDockerUnderMocks({ secrets: GIVEN_SECRETS, jobDurationMs: JOB_DURATION_MS }));
  const { containers: services, jobs } = program.stack;
  await Promise.all([...Object.values(services), ...Object.values(jobs)].map((c) => (c ? resolved(c.id) : undefined)));
  workDir = mkdtempSync(join(tmpdir(), 'infra-stack-'));
});

afterAll(() => rmSync(workDir, { recursive: true, force: true }));

describe('every container', () => {
  it('has a memory limit without extra swap and a CPU limit', () => {
    expect(containers().length).toBeGreaterThanOrEqual(18);
    for (const c of containers()) {
      expect(c.inputs.memory, c.name).toBeGreaterThan(0);
      expect(c.inputs.memorySwap, c.name).toBe(c.inputs.memory);
      expect(Number(c.inputs.cpus), c.name).toBeGreaterThan(0);
      expect(c.inputs.cpuShares, c.name).toBeGreaterThan(0);
    }
  });

  it('has a restart policy: services restart unless stopped, jobs never restart and are awaited', () => {
    for (const c of containers()) {
      if (isJob(c)) {
        expect({ name: c.name, restart: c.inputs.restart, mustRun: c.inputs.mustRun }).toEqual({ name: c.name, restart: 'no', mustRun: false });
        expect(labelsOf(c)['platform.kind'], c.name).toBe('job');
      } else {
        expect(c.inputs.restart, c.name).toBe('unless-stopped');
        expect(labelsOf(c)['platform.kind'], c.name).toBe('service');
      }
    }
  });

  it('that runs for good has a health check with a real test command', () => {
    for (const c of containers().filter((x) => !isJob(x))) {
      const check = reveal(c.inputs.healthcheck) as { tests?: string[]; interval?: string; retries?: number } | undefined;
      expect(check?.tests?.[0], c.name).toMatch(/^CMD(-SHELL)?$/);
      expect(check?.tests?.length, c.name).toBeGreaterThan(1);
      expect(check?.retries, c.name).toBeGreaterThan(0);
    }
  });

  it('cannot gain new privileges and is not privileged', () => {
    for (const c of containers()) {
      expect(c.inputs.securityOpts, c.name).toContain('no-new-privileges:true');
      expect(c.inputs.privileged, c.name).not.toBe(true);
    }
  });

  it('that runs an entry point of this repository runs its compiled JavaScript, built from a source that exists', () => {
    // Words of `sh -c` start scripts count too (the webhook and sites containers create users first).
    const words = containers().flatMap((c) => ((reveal(c.inputs.command) as string[] | undefined) ?? []).flatMap((a) => a.split(/[\s;]+/)));
    const unquoted = words.map((w) => w.replace(/^'|'$/g, ''));
    for (const word of unquoted) expect(word.endsWith('.ts') || word === 'tsx', word).toBe(false);
    const entries = [...new Set(unquoted.filter((a) => a.endsWith('.js') && !a.includes('/node_modules/')))];
    expect(entries.sort()).toEqual([
      'identity/src/clients/sync-cli.js',
      'infra/builder/main.js',
      'infra/egress/main.js',
      'infra/geoserver/cli.js',
      'infra/sites/main.js',
      'services/api/src/db/migrate-cli.js',
      'services/api/src/qc/worker-main.js',
    ]);
    for (const entry of entries) expect(existsSync(join(import.meta.dirname, '..', '..', entry.replace(/\.js$/, '.ts'))), entry).toBe(true);
  });

  it('never mounts the Docker socket', () => {
    for (const c of containers()) {
      const mounts = JSON.stringify(reveal({ v: c.inputs.volumes, m: c.inputs.mounts }));
      expect(mounts, c.name).not.toContain('docker.sock');
    }
  });
});

describe('the identity containers', () => {
  const identity = ['identity-db', 'kratos-migrate', 'kratos', 'hydra-migrate', 'hydra', 'login', 'accounts-ui'];

  it('have exactly the seed limits: 2 GB memory, 2 cores, CPU shares 1024', () => {
    for (const name of identity) {
      const c = container(name);
      expect({ name, memory: c.inputs.memory, cpus: c.inputs.cpus, cpuShares: c.inputs.cpuShares }).toEqual({ name, memory: 2048, cpus: '2', cpuShares: 1024 });
    }
  });

  it('have no disk limit unless identityDiskLimit is set (it needs a storage driver with quotas)', () => {
    for (const name of identity) expect(container(name).inputs.storageOpts, name).toBeUndefined();
  });

  it("the login app's limiters count in its own database on identity-db as the role login, whose password reaches it only inside a secret", () => {
    const login = container('login');
    expect(isSecretEnvelope(login.inputs.envs), 'the login environment is not a secret').toBe(true);
    const url = new URL(envOf(login).LOGIN_DATABASE_URL ?? '');
    expect({ protocol: url.protocol, user: url.username, host: url.host, database: url.pathname }).toEqual({ protocol: 'postgres:', user: 'login', host: 'identity-db:5432', database: '/login' });
    // The same password the roles job gives the role login (never the superuser's, Kratos' or Hydra's).
    const roles = envOf(container('identity-db-roles'));
    expect(isSecretEnvelope(container('identity-db-roles').inputs.envs)).toBe(true);
    expect(url.password).toBe(roles.LOGIN_DB_PASSWORD);
    expect([roles.PGPASSWORD, roles.KRATOS_DB_PASSWORD, roles.HYDRA_DB_PASSWORD]).not.toContain(url.password);
    expect(envOf(login).IDENTITY_REPLICAS).toBe('1');
  });
});

describe('networks and ports', () => {
  const network = (name: string) => registered.find((r) => r.type === 'docker:index/network:Network' && r.name === name)?.inputs;

  it('the admin network and the application network are internal; only the edge, egress, outbound and worker-out route out', () => {
    expect(network('admin')?.internal).toBe(true);
    expect(network('app')?.internal).toBe(true);
    expect(network('geo')?.internal).toBe(true);
    expect(network('hooks')?.internal).toBe(true);
    expect(network('edge')?.internal).toBe(false);
    expect(network('egress')?.internal).toBe(false);
    expect(network('outbound')?.internal).toBe(false);
    expect(network('worker-out')?.internal).toBe(false);
    const routingOut = registered.filter((r) => r.type === 'docker:index/network:Network' && r.inputs.internal !== true).map((r) => r.name);
    expect(routingOut.sort()).toEqual(['edge', 'egress', 'outbound', 'worker-out']);
  });

  it('only the proxy publishes ports, and only 80 and 443', () => {
    const publishing = containers().filter((c) => ((c.inputs.ports as unknown[]) ?? []).length > 0);
    expect(publishing.map((c) => c.name)).toEqual(['proxy']);
    const ports = (reveal(container('proxy').inputs.ports) as { internal: number; external: number; protocol: string }[]).map((p) => `${p.external}/${p.protocol}`);
    expect(ports.sort()).toEqual(['443/tcp', '443/udp', '80/tcp']);
    for (const c of containers()) expect(c.inputs.publishAllPorts, c.name).not.toBe(true);
  });

  it('no admin port (4434, 4445) is published or routed by the proxy', () => {
    for (const c of containers()) {
      const ports = (reveal(c.inputs.ports) as { internal: number; external?: number }[] | undefined) ?? [];
      for (const p of ports) expect([4434, 4445]).not.toContain(p.internal);
    }
    for (const route of program.stack.routes) expect(route.upstream).not.toMatch(/:(4434|4445)$/);
  });

  it('Kratos and Hydra bind their admin APIs to their address on the internal admin network only', () => {
    for (const name of ['kratos', 'hydra']) {
      const c = container(name);
      const adminAttachment = networksOf(c).find((n) => n.name === 'geodata-admin');
      expect(adminAttachment?.ipv4Address, name).toMatch(/^10\.213\.0\.\d+$/);
      expect(envOf(c).SERVE_ADMIN_HOST, name).toBe(adminAttachment?.ipv4Address);
    }
  });

  it('only the services that need the admin APIs join the admin network', () => {
    const onAdmin = containers().filter((c) => networksOf(c).some((n) => n.name === 'geodata-admin')).map((c) => c.name).sort();
    expect(onAdmin).toEqual(['api', 'clients-sync', 'hydra', 'kratos', 'login']);
  });
});

describe('images', () => {
  it('every image is pinned to a version, none is latest', () => {
    const references = [
      ...registered.filter((r) => r.type === 'docker:index/remoteImage:RemoteImage').map((r) => String(r.inputs.name)),
      ...registered.filter((r) => r.type === 'docker:index/image:Image').map((r) => String(r.inputs.imageName)),
    ];
    expect(references.length).toBeGreaterThanOrEqual(10);
    for (const reference of references) {
      expect(reference, reference).not.toMatch(/:latest$/);
      expect(isPinnedImage(reference), reference).toBe(true);
    }
  });

  it('every container runs an image the program declared (no stray image strings)', () => {
    const declared = new Set([
      ...registered.filter((r) => r.type === 'docker:index/remoteImage:RemoteImage').map((r) => `sha256:${r.name}`),
      ...registered.filter((r) => r.type === 'docker:index/image:Image').map((r) => String(r.inputs.imageName)),
    ]);
    for (const c of containers()) expect(declared.has(String(c.inputs.image)), `${c.name}: ${String(c.inputs.image)}`).toBe(true);
  });

  it('the project images are built from the repository Dockerfiles and not pushed anywhere', () => {
    const builds = registered.filter((r) => r.type === 'docker:index/image:Image');
    expect(builds.map((b) => b.name).sort()).toEqual(['api', 'login', 'ops', 'webhook']);
    for (const b of builds) {
      expect(b.inputs.skipPush).toBe(true);
      expect(String((b.inputs.build as { dockerfile: string }).dockerfile)).toMatch(/infra\/docker\/[a-z]+\.Dockerfile$/);
      // The tag carries the hash of what the image copies: new code under the same imageTag replaces the containers.
      expect(String(b.inputs.imageName), b.name).toMatch(new RegExp(`^geodata/${b.name}:0\\.1\\.0-[0-9a-f]{12}$`));
    }
  });
});

describe('secrets', () => {
  it('operator-set secrets never appear outside a Pulumi secret in any resource input', () => {
    const markers = Object.values(GIVEN_SECRETS).flatMap((value) => value.match(/MARK-[A-Za-z0-9-]+/g) ?? []);
    expect(markers.length).toBe(6);
    for (const r of registered) {
      for (const text of plainStrings(r.inputs)) {
        for (const marker of markers) expect(text.includes(marker), `${r.type} ${r.name} leaks a secret`).toBe(false);
      }
    }
  });

  it('generated secrets never appear outside a Pulumi secret in any container input', () => {
    for (const c of containers()) {
      for (const text of plainStrings(c.inputs)) expect(text, c.name).not.toMatch(/generated-[a-zA-Z]+-0123456789/);
    }
  });

  it('secrets the operator did not set are generated with RandomPassword (the cipher is exactly 32 characters)', () => {
    const passwords = registered.filter((r) => r.type === 'random:index/randomPassword:RandomPassword');
    const names = passwords.map((p) => p.name);
    expect(names).toContain('hydraSystemSecret');
    expect(names).toContain('featuresDbPassword');
    expect(names).not.toContain('geoserverAdminPassword');
    expect(names).not.toContain('kratosCipherSecret');
    expect(passwords.find((p) => p.name === 'hydraSystemSecret')?.inputs.length).toBeGreaterThanOrEqual(32);
  });

  it('containers that receive credentials get their whole environment as a secret', () => {
    for (const c of containers()) {
      const names = Object.keys(envOf(c));
      if (names.some((n) => /PASSWORD|SECRET|DSN|TOKEN|DATABASE_URL|SMTP/.test(n))) {
        expect(isSecretEnvelope(c.inputs.envs), `${c.name} env is not a secret`).toBe(true);
      }
    }
  });

  it('the stack outputs the webhook secrets only as a secret', async () => {
    expect(await pulumi.isSecret(program.webhookSecrets)).toBe(true);
  });

  it('the clients-sync output, where a new client secret appears once, is a secret', async () => {
    expect(await pulumi.isSecret(program.oauth2ClientsSync)).toBe(true);
  });
});

describe('the proxy', () => {
  const caddyfileOf = () => {
    const uploads = reveal(container('proxy').inputs.uploads) as { file: string; content: string }[];
    const upload = uploads.find((u) => u.file === '/etc/caddy/Caddyfile');
    if (!upload) throw new Error('the proxy has no Caddyfile upload');
    return upload.content;
  };
  const adapted = () => {
    const path = join(workDir, 'Caddyfile');
    writeFileSync(path, caddyfileOf());
    return JSON.parse(execFileSync('caddy', ['adapt', '--config', path, '--adapter', 'caddyfile'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })) as CaddyJson;
  };

  it('gets a Caddyfile that the real `caddy validate` accepts', () => {
    const path = join(workDir, 'Caddyfile.validate');
    writeFileSync(path, caddyfileOf());
    const output = execFileSync('caddy', ['validate', '--config', path, '--adapter', 'caddyfile'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    expect(output).toContain('Valid configuration');
  });

  it("routes every deploy target domain to its port on that target's own site container", () => {
    const routes = routeTable(adapted());
    const targets = loadTargets(join(import.meta.dirname, '..', '..', 'config', 'targets.yaml'));
    expect(targets.length).toBe(5);
    for (const target of targets) expect(routes.get(target.domain), target.domain).toEqual([`site-${target.deployPath}:${target.port}`]);
  });

  it('routes the API, GeoServer and the auth domains, each over automatic TLS (port 443)', () => {
    const json = adapted();
    const routes = routeTable(json);
    expect(routes.get('api.example.org')).toEqual(['api:8080']);
    expect(routes.get('geo.example.org')).toEqual(['geoserver:8080']);
    expect(routes.get('auth.example.org')).toEqual(['login:3000']);
    expect(routes.get('id.example.org')).toEqual(['kratos:4433']);
    expect(routes.get('oauth.example.org')).toEqual(['hydra:4444']);
    expect(routes.get('accounts.example.org')).toEqual(['accounts-ui:4455']);
    const listen = Object.values(json.apps.http.servers).flatMap((s) => s.listen);
    expect(listen).toEqual([':443']);
    expect(JSON.stringify(json)).not.toContain('"automatic_https":{"disable":true}');
  });

  it('guards GeoServer\'s REST API, its tile cache REST API and its web admin like /admin', () => {
    const guard = siteSubroutes(adapted()).get('geo.example.org')?.find((r) => r.handle?.some((h) => h.handler === 'static_response' && h.status_code === 403));
    const match = guard?.match?.[0] as { path?: string[] } | undefined;
    expect(match?.path).toEqual(expect.arrayContaining(['/admin*', '/geoserver/rest*', '/geoserver/gwc/rest*', '/geoserver/web*']));
  });

  it('answers 403 to /admin from outside the internal ranges on every site', () => {
    const json = adapted();
    for (const [host, subroutes] of siteSubroutes(json)) {
      const guard = subroutes.find((r) => r.handle?.some((h) => h.handler === 'static_response' && h.status_code === 403));
      expect(guard, host).toBeDefined();
      const match = guard?.match?.[0] as { path?: string[]; not?: { remote_ip?: { ranges: string[] } }[] };
      expect(match.path, host).toContain('/admin*');
      expect(match.not?.[0]?.remote_ip?.ranges, host).toEqual(['10.0.0.0/8', '192.168.0.0/16']);
    }
  });
});

describe('order of creation', () => {
  const timing = (name: string) => {
    const r = registered.find((x) => x.type === CONTAINER && x.name === name);
    if (!r || r.resolvedAt === undefined) throw new Error(`${name} not registered`);
    return r;
  };

  it('Kratos and Hydra are created only after their migration jobs finished successfully', () => {
    for (const [serviceName, jobName] of [['kratos', 'kratos-migrate'], ['hydra', 'hydra-migrate']] as const) {
      const migration = timing(jobName);
      const server = timing(serviceName);
      expect((migration.resolvedAt ?? 0) - migration.registeredAt, jobName).toBeGreaterThanOrEqual(JOB_DURATION_MS - 5);
      expect(server.registeredAt, `${serviceName} registered before ${jobName} finished`).toBeGreaterThanOrEqual(migration.resolvedAt as number);
      expect(labelsOf(server)['platform.after']).toBe('succeeded');
    }
  });

  it('the migrations run after the identity database roles, the API after its migration', () => {
    expect(timing('kratos-migrate').registeredAt).toBeGreaterThanOrEqual(timing('identity-db-roles').resolvedAt as number);
    expect(timing('hydra-migrate').registeredAt).toBeGreaterThanOrEqual(timing('identity-db-roles').resolvedAt as number);
    expect(timing('api').registeredAt).toBeGreaterThanOrEqual(timing('api-migrate').resolvedAt as number);
    expect(timing('geoserver-provision').registeredAt).toBeGreaterThanOrEqual(timing('api-migrate').resolvedAt as number);
  });

  it('the backup is created only after the API, Kratos and Hydra migrations succeeded, so its first dump holds their schemas', () => {
    for (const migration of ['api-migrate', 'kratos-migrate', 'hydra-migrate']) {
      expect(timing('backup').registeredAt, `backup registered before ${migration} finished`).toBeGreaterThanOrEqual(timing(migration).resolvedAt as number);
    }
    expect(labelsOf(container('backup'))['platform.after']).toBe('succeeded');
  });
});

describe('branch sites', () => {
  it("a builder restarts its target's site through a control socket on a volume shared with that site alone, not Docker", () => {
    const mounts = (name: string) => (reveal(container(name).inputs.volumes) as { volumeName: string; containerPath: string; readOnly?: boolean }[] | undefined) ?? [];
    for (const dp of ['main', 'feature-de1']) {
      expect(envOf(container(`builder-${dp}`)).RESTART_COMMAND).toBe('/usr/local/bin/sites-restart');
      const control = `geodata-site-control-${dp}`;
      const holders = containers().filter((c) => mounts(c.name).some((v) => v.volumeName === control)).map((c) => c.name);
      expect(holders.sort()).toEqual([`builder-${dp}`, `site-${dp}`]);
      expect(mounts(`site-${dp}`).find((v) => v.containerPath === '/srv/site')).toMatchObject({ volumeName: `geodata-site-${dp}`, readOnly: true });
    }
  });

  it("the webhook hands a deploy to the target's builder through a spool shared with that builder alone", () => {
    const webhookEnv = envOf(container('webhook'));
    expect(webhookEnv.DEPLOY_SCRIPT).toBe('/usr/local/bin/build-submit');
    expect(webhookEnv.DEPLOY_ROOT).toBe('/srv/spool');
    const spools = (reveal(container('webhook').inputs.volumes) as { volumeName: string; containerPath: string }[]).filter((v) => v.containerPath.startsWith('/srv/spool/'));
    const targets = loadTargets(join(import.meta.dirname, '..', '..', 'config', 'targets.yaml'));
    expect(spools.map((v) => v.containerPath).sort()).toEqual(targets.map((t) => `/srv/spool/${t.deployPath}`).sort());
    for (const { volumeName } of spools) {
      const holders = containers().filter((c) => ((reveal(c.inputs.volumes) as { volumeName: string }[] | undefined) ?? []).some((v) => v.volumeName === volumeName)).map((c) => c.name);
      expect(holders.sort(), volumeName).toEqual([volumeName.replace('geodata-build-spool-', 'builder-'), 'webhook']);
    }
  });

  it('every deploy target has its webhook secret in the webhook environment', () => {
    const webhookEnv = envOf(container('webhook'));
    expect(webhookEnv.SECRET_MAIN).toBe('MARK-webhook-main-current');
    for (const name of ['SECRET_DEVELOP', 'SECRET_TEAM_DE1', 'SECRET_TEAM_DE2', 'SECRET_TEAM_FV']) {
      expect(webhookEnv[name], name).toMatch(/^[0-9a-f]{64}$/);
    }
  });

  it('a previous webhook secret set for a rotation reaches the webhook server; unrelated keys do not', () => {
    const webhookEnv = envOf(container('webhook'));
    expect(webhookEnv.SECRET_MAIN_PREVIOUS).toBe('MARK-webhook-main-previous');
    expect(webhookEnv.UNRELATED_PREVIOUS).toBeUndefined();
  });

  it('no webhook secret reaches a builder or a site', () => {
    for (const c of containers().filter((x) => /^(builder|site)-/.test(x.name))) {
      expect(Object.keys(envOf(c)).filter((n) => /^SECRET_|WEBHOOK_/.test(n)), c.name).toEqual([]);
    }
  });
});

describe('backups', () => {
  it('a backup service dumps the features, Kratos and Hydra databases', () => {
    const backupEnv = envOf(container('backup'));
    expect(String(backupEnv.BACKUP_DATABASES).split(' ').map((s) => s.split('=')[0])).toEqual(['features', 'kratos', 'hydra']);
  });
});

describe('API authentication in the stack', () => {
  const uploaded = (name: string, file: string) => {
    const upload = (reveal(container(name).inputs.uploads) as { file: string; content: string }[]).find((u) => u.file === file);
    if (!upload) throw new Error(`${name} has no upload ${file}`);
    return upload.content;
  };

  it('Hydra issues opaque access tokens, and the API checks them at Hydra (introspection) and sessions at Kratos', () => {
    const hydraYml = parseYaml(uploaded('hydra', '/etc/config/hydra/hydra.yml')) as { strategies: { access_token: string } };
    expect(hydraYml.strategies.access_token).toBe('opaque');
    const apiEnv = envOf(container('api'));
    expect(apiEnv.HYDRA_ADMIN_URL).toBe('http://hydra-admin:4445');
    expect(apiEnv.KRATOS_PUBLIC_URL).toBe('http://kratos:4433');
    expect(apiEnv.KRATOS_ADMIN_URL).toBe('http://kratos-admin:4434');
    expect(apiEnv.AUTH_AUDIENCE).toBe('geodata-api');
    // Hydra's JWKS signs ID tokens: accepting JWTs signed with it would take ID tokens as access tokens.
    expect(apiEnv.AUTH_JWKS_URL).toBeUndefined();
  });

  it('Kratos accepts passkeys and WebAuthn keys on the login app and on the accounts pages where they are registered', () => {
    const kratosYml = parseYaml(uploaded('kratos', '/etc/config/kratos/kratos.yml')) as { selfservice: { methods: Record<string, { config: { rp: { origins: string[] } } }> } };
    for (const method of ['passkey', 'webauthn']) {
      expect(kratosYml.selfservice.methods[method]?.config.rp.origins, method).toEqual(['https://auth.example.org', 'https://accounts.example.org']);
    }
  });

  it('every synced OAuth2 client may request tokens for the audience the API requires', () => {
    const clients = (parseYaml(uploaded('clients-sync', '/etc/config/identity/clients.yaml')) as { clients: { client_id: string; audience?: string[] }[] }).clients;
    expect(clients.length).toBeGreaterThan(0);
    for (const client of clients) expect(client.audience, client.client_id).toContain(envOf(container('api')).AUTH_AUDIENCE);
  });

  it('every internal URL a container is given names a host it reaches on a network it shares with that host', () => {
    const aliasesOn = new Map<string, Set<string>>();
    for (const c of containers()) {
      for (const n of networksOf(c)) {
        const set = aliasesOn.get(n.name) ?? new Set<string>();
        for (const alias of n.aliases ?? []) set.add(alias);
        aliasesOn.set(n.name, set);
      }
    }
    let checked = 0;
    for (const c of containers()) {
      for (const [name, value] of Object.entries(envOf(c))) {
        const internal = /^(?:https?|postgres):\/\/(?:[^@/]*@)?([a-z][a-z0-9-]*)(?::\d+)?(?:\/|$)/.exec(value);
        if (!internal?.[1]) continue;
        const host = internal[1];
        const reachable = networksOf(c).some((n) => aliasesOn.get(n.name)?.has(host));
        expect(reachable, `${c.name} ${name}=${host} is on no network shared with ${host}`).toBe(true);
        checked += 1;
      }
    }
    expect(checked).toBeGreaterThanOrEqual(10);
  });

  it('the clients are synced after Hydra\'s migrations, once Hydra is up', () => {
    const sync = registered.find((r) => r.type === CONTAINER && r.name === 'clients-sync');
    const migration = registered.find((r) => r.type === CONTAINER && r.name === 'hydra-migrate');
    expect(sync?.registeredAt).toBeGreaterThanOrEqual(migration?.resolvedAt as number);
    expect(labelsOf(container('clients-sync'))['platform.after']).toBe('succeeded');
    expect(isJob(container('clients-sync'))).toBe(true);
  });
});

describe('GeoServer', () => {
  it('shares its network only with the proxy, the features database and its provisioning job', () => {
    const geoNetworks = networksOf(container('geoserver')).map((n) => n.name);
    expect(geoNetworks).toEqual(['geodata-geo']);
    const members = containers().filter((c) => networksOf(c).some((n) => n.name === 'geodata-geo')).map((c) => c.name).sort();
    expect(members).toEqual(['features-db', 'geoserver', 'geoserver-provision', 'proxy']);
  });

  it('WFS-T writers are platform users: the proxy asks the API, the provisioning job writes the header authentication into GeoServer\'s data directory as GeoServer\'s user', () => {
    const caddyfile = program.stack.caddyfile;
    const geoSite = caddyfile.slice(caddyfile.indexOf('\ngeo.example.org {'), caddyfile.indexOf('\n}', caddyfile.indexOf('\ngeo.example.org {')));
    expect(geoSite).toMatch(/request_header -X-Geodata-User\n\s*request_header -X-Geodata-Role[\s\S]*forward_auth @write api:8080 \{\n\s*uri \/api\/auth\/forward\n\s*copy_headers X-Geodata-User X-Geodata-Role/);
    const provision = container('geoserver-provision');
    const data = (name: string) => (reveal(container(name).inputs.volumes) as { volumeName: string; containerPath: string }[]).find((v) => v.containerPath === '/opt/geoserver_data')?.volumeName;
    expect(data('geoserver-provision')).toBeDefined();
    expect(data('geoserver-provision')).toBe(data('geoserver'));
    const provisionEnv = envOf(provision);
    expect(provisionEnv.GEOSERVER_DATA_DIR).toBe('/opt/geoserver_data');
    expect(provisionEnv.GEOSERVER_WRITE_ROLES?.split(',').sort()).toEqual(['ROLE_ADMIN', 'ROLE_CONTRIBUTOR', 'ROLE_REVIEWER']);
    const geoserverEnv = envOf(container('geoserver'));
    expect(provision.inputs.user).toBe(`${geoserverEnv.RUN_WITH_USER_UID}:${geoserverEnv.RUN_WITH_USER_GID}`);
    // GeoTools refuses session SQL other than SET SESSION AUTHORIZATION unless the JVM allows it.
    expect(geoserverEnv.JAVA_TOOL_OPTIONS).toContain('-Dorg.geotools.jdbc.allowedSessionStartupSql=');
    expect(geoserverEnv.JAVA_TOOL_OPTIONS).toContain('-Dorg.geotools.jdbc.allowedSessionCloseupSql=');
  });
});

describe('preview sites', () => {
  const targets = () => loadTargets(join(import.meta.dirname, '..', '..', 'config', 'targets.yaml'));

  it('live outside the session cookie domain', () => {
    const previews = targets().filter(isPreviewTarget);
    expect(previews.length).toBe(3);
    for (const t of previews) expect(t.domain.endsWith('.example.org') || t.domain === 'example.org', t.domain).toBe(false);
  });

  it('are never an origin that CORS with credentials allows, at the API or at GeoServer', () => {
    const apiOrigins = envOf(container('api')).CORS_ORIGINS?.split(',') ?? [];
    const geoOrigins = envOf(container('geoserver')).CORS_ALLOWED_ORIGINS?.split(',') ?? [];
    expect(apiOrigins).toContain('https://main.sites.example.org');
    expect(envOf(container('geoserver')).CORS_ALLOW_CREDENTIALS).toBe('true');
    for (const t of targets().filter(isPreviewTarget)) {
      expect(apiOrigins, t.domain).not.toContain(`https://${t.domain}`);
      expect(geoOrigins, t.domain).not.toContain(`https://${t.domain}`);
    }
    for (const origin of [...apiOrigins, ...geoOrigins]) expect(new URL(origin).hostname.endsWith('.example.org'), origin).toBe(true);
  });
});

interface CaddyRoute {
  match?: { host?: string[] }[];
  handle?: { handler: string; status_code?: number; routes?: CaddyRoute[]; upstreams?: { dial: string }[] }[];
}
interface CaddyJson {
  apps: { http: { servers: Record<string, { listen: string[]; routes: CaddyRoute[] }> } };
}

function siteSubroutes(json: CaddyJson): Map<string, CaddyRoute[]> {
  const sites = new Map<string, CaddyRoute[]>();
  for (const server of Object.values(json.apps.http.servers)) {
    for (const route of server.routes) {
      for (const host of route.match?.[0]?.host ?? []) sites.set(host, route.handle?.[0]?.routes ?? []);
    }
  }
  return sites;
}

function routeTable(json: CaddyJson): Map<string, string[]> {
  const table = new Map<string, string[]>();
  for (const [host, subroutes] of siteSubroutes(json)) {
    const dials = subroutes.flatMap((r) => r.handle ?? []).filter((h) => h.handler === 'reverse_proxy').flatMap((h) => (h.upstreams ?? []).map((u) => u.dial));
    table.set(host, dials);
  }
  return table;
}
