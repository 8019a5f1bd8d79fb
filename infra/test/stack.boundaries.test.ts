import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { loadTargets } from '../../services/shared/targets.js';
import { ipv4InCidr } from '../config.js';
import { BUILDER_CAPABILITIES } from '../stack/sites.js';
import { declareDockerUnderMocks, envVariables, exampleConfig, isSecretEnvelope, resolved, reveal, type RegisteredResource } from '../testing/pulumi-mocks.js';

/**
 * One trust boundary per deploy target (docs/infra.md, "Trust boundaries"), as policies on what the
 * Pulumi program declares, read under the runtime mocks. A site runs code from team pushes; so does
 * a build. Neither may reach another target, the webhook, a database, GeoServer, Ory or Docker.
 */

const CONTAINER = 'docker:index/container:Container';
const NETWORK = 'docker:index/network:Network';
const targets = loadTargets(join(import.meta.dirname, '..', '..', 'config', 'targets.yaml'));
let registered: RegisteredResource[];
let program: typeof import('../program.js');

beforeAll(async () => {
  ({ registered, program } = await declareDockerUnderMocks());
  await Promise.all(Object.values(program.stack.containers).map((c) => (c ? resolved(c.id) : undefined)));
});

interface Declared {
  name: string;
  inputs: Record<string, unknown>;
  env: Record<string, string>;
  labels: Record<string, string>;
  networks: string[];
  volumes: { volumeName?: string; hostPath?: string; containerPath: string; readOnly?: boolean }[];
  image: string;
}

const containers = (): Declared[] =>
  registered
    .filter((r) => r.type === CONTAINER)
    .map((r) => ({
      name: r.name,
      inputs: r.inputs,
      env: envVariables(r.inputs.envs),
      labels: Object.fromEntries(((reveal(r.inputs.labels) as { label: string; value: string }[] | undefined) ?? []).map((l) => [l.label, l.value])),
      networks: ((reveal(r.inputs.networksAdvanced) as { name: string }[] | undefined) ?? []).map((n) => n.name),
      volumes: (reveal(r.inputs.volumes) as Declared['volumes'] | undefined) ?? [],
      image: String(reveal(r.inputs.image)),
    }));
const container = (name: string): Declared => {
  const found = containers().find((c) => c.name === name);
  if (!found) throw new Error(`the program declares no container ${name}`);
  return found;
};
const site = (dp: string) => container(`site-${dp}`);
const builder = (dp: string) => container(`builder-${dp}`);
const membersOf = (network: string) => containers().filter((c) => c.networks.includes(network)).map((c) => c.name).sort();
const sitesAndBuilders = () => containers().filter((c) => /^(site|builder)-/.test(c.name));
const remoteImage = (c: Declared) => registered.find((r) => r.type === 'docker:index/remoteImage:RemoteImage' && `sha256:${r.name}` === c.image)?.inputs.name as string | undefined;

describe('each deploy target', () => {
  it('has a site container of its own, and a builder of its own', () => {
    for (const t of targets) {
      const own = containers().filter((c) => c.labels['platform.target'] === t.key).map((c) => c.name).sort();
      expect(own, t.key).toEqual([`builder-${t.deployPath}`, `site-${t.deployPath}`]);
    }
    expect(containers().filter((c) => c.labels['platform.component'] === 'sites')).toEqual([]);
  });

  it('has a network of its own for its site, internal, shared with the proxy alone', () => {
    for (const t of targets) {
      expect(site(t.deployPath).networks, t.key).toEqual([`geodata-site-${t.deployPath}`]);
      expect(membersOf(`geodata-site-${t.deployPath}`), t.key).toEqual(['proxy', `site-${t.deployPath}`]);
      const network = registered.find((r) => r.type === NETWORK && r.inputs.name === `geodata-site-${t.deployPath}`);
      expect(network?.inputs.internal, t.key).toBe(true);
    }
  });

  it('has a site network inside sitesSubnet and outside the internal ranges, so the guarded paths answer its site 403', () => {
    const subnets = targets.map((t) => (registered.find((r) => r.type === NETWORK && r.inputs.name === `geodata-site-${t.deployPath}`)?.inputs.ipamConfigs as { subnet: string }[])[0]?.subnet as string);
    expect(new Set(subnets).size).toBe(targets.length);
    for (const subnet of subnets) {
      expect(subnet).toMatch(/^172\.30\.1\.\d+\/28$/);
      const [base] = subnet.split('/');
      const last = base!.replace(/\d+$/, (d) => String(Number(d) + 15));
      for (const range of ['10.0.0.0/8', '192.168.0.0/16']) for (const ip of [base!, last]) expect(ipv4InCidr(ip, range), `${ip} in ${range}`).toBe(false);
    }
  });

  it('has a volume of its own for its releases: read-only in its site, written by its builder, mounted nowhere else', () => {
    for (const t of targets) {
      const volume = `geodata-site-${t.deployPath}`;
      const holders = containers().filter((c) => c.volumes.some((v) => v.volumeName === volume));
      expect(holders.map((c) => c.name).sort(), t.key).toEqual([`builder-${t.deployPath}`, `site-${t.deployPath}`]);
      expect(site(t.deployPath).volumes.find((v) => v.volumeName === volume)?.readOnly, t.key).toBe(true);
    }
  });

  it('has site and build users with uids no other target, and no other container, uses', () => {
    const uids = targets.flatMap((t) => [Number(builder(t.deployPath).env.BUILDER_SITE_UID), Number(builder(t.deployPath).env.BUILDER_BUILD_UID)]);
    expect(new Set(uids).size).toBe(uids.length);
    for (const uid of uids) expect(uid).toBeGreaterThanOrEqual(20_000);
    for (const t of targets) expect(site(t.deployPath).inputs.user, t.key).toBe(`${builder(t.deployPath).env.BUILDER_SITE_UID}:${builder(t.deployPath).env.BUILDER_SITE_UID}`);
    const others = containers().filter((c) => !/^site-/.test(c.name)).map((c) => String(c.inputs.user ?? ''));
    for (const uid of uids) expect(others.some((u) => u.split(':')[0] === String(uid)), String(uid)).toBe(false);
  });
});

describe('network namespaces', () => {
  it('no site or builder shares a network namespace, in either direction', () => {
    for (const c of containers()) {
      const mode = String(reveal(c.inputs.networkMode) ?? '');
      expect(mode, c.name).not.toMatch(/^(container:|host$)/);
    }
    for (const c of sitesAndBuilders()) expect(reveal(c.inputs.networkMode), c.name).toBe('bridge');
  });

  it('the webhook shares no namespace with a site: its own network namespace, no network and no volume in common', () => {
    const webhook = container('webhook');
    expect(reveal(webhook.inputs.networkMode)).toBe('bridge');
    expect(webhook.networks).toEqual(['geodata-hooks']);
    expect(membersOf('geodata-hooks')).toEqual(['proxy', 'webhook']);
    for (const t of targets) {
      const s = site(t.deployPath);
      expect(s.networks.filter((n) => webhook.networks.includes(n)), t.key).toEqual([]);
      expect(s.volumes.filter((v) => webhook.volumes.some((w) => w.volumeName === v.volumeName)), t.key).toEqual([]);
    }
    for (const c of containers()) expect([c.inputs.pidMode, c.inputs.ipcMode], c.name).not.toContain('host');
  });
});

describe('what team code can reach', () => {
  /** Networks holding a database, GeoServer, Ory, or the admin network itself. */
  const forbidden = () => {
    const holders = containers().filter((c) => /^(postgis\/postgis|postgres|docker\.osgeo\.org\/geoserver|oryd\/)/.test(remoteImage(c) ?? ''));
    expect(holders.map((c) => c.name).sort()).toEqual(expect.arrayContaining(['features-db', 'geoserver', 'hydra', 'identity-db', 'kratos']));
    return new Set([...holders.flatMap((c) => c.networks), 'geodata-admin']);
  };

  it('no build or site container is attached to a network that holds a database, GeoServer, Ory or the admin network', () => {
    const bad = forbidden();
    for (const c of [...sitesAndBuilders(), container('egress')]) expect(c.networks.filter((n) => bad.has(n)), c.name).toEqual([]);
  });

  it('no build, site, webhook or egress container mounts the Docker socket, or any host path', () => {
    for (const c of [...sitesAndBuilders(), container('webhook'), container('egress')]) {
      expect(JSON.stringify(reveal({ v: c.inputs.volumes, m: c.inputs.mounts })), c.name).not.toContain('docker.sock');
      expect(c.volumes.filter((v) => v.hostPath !== undefined || v.volumeName === undefined), c.name).toEqual([]);
      expect(c.inputs.mounts, c.name).toBeUndefined();
      expect(c.inputs.privileged, c.name).not.toBe(true);
      expect(Object.keys(c.env).filter((n) => /DOCKER_HOST|DATABASE_URL|PGPASSWORD|(KRATOS|HYDRA|GEOSERVER).*ADMIN/.test(n)), c.name).toEqual([]);
      // Ory and GeoServer by their public names only (the platform sites' sign-in, through the proxy), never an internal address.
      const publicUrls = Object.values(exampleConfig().domains as Record<string, string>).map((d) => `https://${d}`);
      for (const [name, value] of Object.entries(c.env).filter(([n]) => /KRATOS|HYDRA|GEOSERVER/.test(n))) {
        expect(publicUrls.some((u) => value === u || value?.startsWith(`${u}/`)), `${c.name} ${name}=${value}`).toBe(true);
      }
    }
  });

  it('a builder joins only its build network, which it shares with the egress proxy alone', () => {
    for (const t of targets) {
      expect(builder(t.deployPath).networks, t.key).toEqual([`geodata-build-${t.deployPath}`]);
      expect(membersOf(`geodata-build-${t.deployPath}`), t.key).toEqual([`builder-${t.deployPath}`, 'egress']);
    }
    expect(container('egress').networks.filter((n) => !n.startsWith('geodata-build-'))).toEqual(['geodata-outbound']);
    expect(membersOf('geodata-outbound')).toEqual(['egress']);
  });

  it('the egress proxy lets builds through to the package registry only; the git hosts need the builders\' credential', () => {
    const egress = container('egress');
    expect(egress.env.EGRESS_OPEN).toBe('registry.npmjs.org:443');
    expect(egress.env.EGRESS_WITH_CREDENTIAL).toBe('git.example.org:443');
    expect(isSecretEnvelope(egress.inputs.envs)).toBe(true);
    // The credential is in the builder's environment (its deploy script's), never passed to a build step.
    for (const t of targets) {
      const env = builder(t.deployPath).env;
      expect(env.EGRESS_PROXY_URL, t.key).toBe('http://egress:3128');
      expect(env.EGRESS_GIT_TOKEN, t.key).toBe(egress.env.EGRESS_GIT_TOKEN);
      expect(isSecretEnvelope(builder(t.deployPath).inputs.envs), t.key).toBe(true);
    }
    const holders = containers().filter((c) => Object.values(c.env).includes(egress.env.EGRESS_GIT_TOKEN!)).map((c) => c.name);
    expect(holders.sort()).toEqual([...targets.map((t) => `builder-${t.deployPath}`), 'egress'].sort());
  });
});

describe('the site containers', () => {
  it('have a read-only root, drop every capability and gain no new privileges', () => {
    for (const t of targets) {
      const s = site(t.deployPath);
      expect(s.inputs.readOnly, t.key).toBe(true);
      expect(reveal(s.inputs.capabilities), t.key).toEqual({ drops: ['ALL'], adds: [] });
      expect(s.inputs.securityOpts, t.key).toContain('no-new-privileges:true');
      expect(String(s.inputs.user).split(':')[0], t.key).not.toBe('0');
    }
  });

  it('have memory (no extra swap), CPU and pids limits, and a /dev/shm and /tmp of their own, bounded', () => {
    for (const t of targets) {
      const s = site(t.deployPath);
      expect(s.inputs.memory, t.key).toBeGreaterThan(0);
      expect(s.inputs.memorySwap, t.key).toBe(s.inputs.memory);
      expect(Number(s.inputs.cpus), t.key).toBeGreaterThan(0);
      const nproc = (reveal(s.inputs.ulimits) as { name: string; soft: number; hard: number }[]).find((u) => u.name === 'nproc');
      expect(nproc?.hard, t.key).toBeGreaterThan(0);
      expect(nproc?.soft, t.key).toBe(nproc?.hard);
      expect(s.inputs.shmSize, t.key).toBeGreaterThan(0);
      expect(s.inputs.ipcMode, t.key).toBe('private');
      expect((reveal(s.inputs.tmpfs) as Record<string, string>)['/tmp'], t.key).toMatch(/size=\d+m/);
    }
  });

  it('are reached by the proxy alone, on their target\'s port', () => {
    for (const t of targets) {
      const s = site(t.deployPath);
      const host = `site-${t.deployPath}`;
      expect(s.env.SITE_PORT, t.key).toBe(String(t.port));
      const upstreams = program.stack.routes.filter((r) => r.upstream.split(':')[0] === host);
      expect(upstreams.map((r) => [r.domain, r.upstream]), t.key).toEqual([[t.domain, `${host}:${t.port}`]]);
      const proxied = program.stack.caddyfile.split('\n').filter((l) => l.includes(host));
      expect(proxied.map((l) => l.trim()), t.key).toEqual([`reverse_proxy ${host}:${t.port}`]);
      expect(((reveal(s.inputs.ports) as unknown[] | undefined) ?? []).length, t.key).toBe(0);
      // No other container is given the site's address.
      for (const c of containers().filter((x) => x.name !== 'proxy')) {
        for (const value of Object.values(c.env)) expect(value, `${c.name} → ${host}`).not.toMatch(new RegExp(`(^|//|@)${host}(:|/|$)`));
      }
    }
  });

  it('run the site supervisor and no build: no deploy script, no build user, no secret', () => {
    for (const t of targets) {
      const s = site(t.deployPath);
      expect(reveal(s.inputs.command), t.key).toEqual(['node', 'infra/sites/main.js']);
      expect(Object.keys(s.env).filter((n) => /^DEPLOY_|BUILD|SECRET|TOKEN|PASSWORD|RESTART/.test(n)), t.key).toEqual([]);
      expect(isSecretEnvelope(s.inputs.envs), t.key).toBe(false);
    }
  });
});

describe('builds', () => {
  it('run in their target\'s builder, never in the webhook\'s or a site\'s container', () => {
    const webhook = container('webhook');
    expect(webhook.env.DEPLOY_SCRIPT).toBe('/usr/local/bin/build-submit');
    expect(webhook.env.DEPLOY_ISOLATION).toBe('none');
    expect(Object.keys(webhook.env).filter((n) => /^(BUILD_|BUILDER_|RESTART_COMMAND|SITES_CONTROL)/.test(n))).toEqual([]);
    for (const t of targets) expect(builder(t.deployPath).env.DEPLOY_SCRIPT, t.key).toBe('/app/scripts/deploy-branch.sh');
  });

  it('are bounded: memory, CPU, processes, file size, /dev/shm and /tmp of the builder; time and disk per deploy', () => {
    const webhookDeadline = Number(container('webhook').env.DEPLOY_TIMEOUT_SECONDS);
    for (const t of targets) {
      const b = builder(t.deployPath);
      expect(b.inputs.memory, t.key).toBeGreaterThan(0);
      expect(b.inputs.memorySwap, t.key).toBe(b.inputs.memory);
      expect(Number(b.inputs.cpus), t.key).toBeGreaterThan(0);
      const ulimits = Object.fromEntries((reveal(b.inputs.ulimits) as { name: string; hard: number }[]).map((u) => [u.name, u.hard]));
      expect(ulimits.nproc, t.key).toBeGreaterThan(0);
      expect(ulimits.fsize, t.key).toBeGreaterThan(0);
      expect(b.inputs.shmSize, t.key).toBeGreaterThan(0);
      expect(b.inputs.ipcMode, t.key).toBe('private');
      expect((reveal(b.inputs.tmpfs) as Record<string, string>)['/tmp'], t.key).toMatch(/size=\d+m/);
      // The builder's deadline comes first, so its own stop (and the script's rollback) runs before the webhook gives up.
      expect(Number(b.env.BUILD_TIMEOUT_SECONDS), t.key).toBeLessThan(webhookDeadline);
      expect(Number(b.env.BUILD_DISK_LIMIT_MB), t.key).toBeGreaterThan(0);
    }
  });

  it('run under a builder that keeps only the capabilities a deploy needs, and never gains new ones', () => {
    expect([...BUILDER_CAPABILITIES].sort()).toEqual(['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'KILL', 'SETGID', 'SETUID']);
    for (const t of targets) {
      const b = builder(t.deployPath);
      expect(reveal(b.inputs.capabilities), t.key).toEqual({ drops: ['ALL'], adds: [...BUILDER_CAPABILITIES] });
      expect(b.inputs.securityOpts, t.key).toContain('no-new-privileges:true');
    }
  });
});

describe('the webhook and the egress proxy', () => {
  it('run as node with no capabilities and no new privileges', () => {
    for (const name of ['webhook', 'egress']) {
      const c = container(name);
      expect(c.inputs.user, name).toBe('node');
      expect(reveal(c.inputs.capabilities), name).toEqual({ drops: ['ALL'], adds: [] });
      expect(c.inputs.securityOpts, name).toContain('no-new-privileges:true');
    }
    expect(container('egress').inputs.readOnly).toBe(true);
  });
});

describe('every container', () => {
  it('that has a read-only root takes no uploaded file (Docker copies nothing into a read-only root)', () => {
    for (const c of containers().filter((x) => x.inputs.readOnly === true)) expect(((reveal(c.inputs.uploads) as unknown[] | undefined) ?? []).length, c.name).toBe(0);
  });
});
