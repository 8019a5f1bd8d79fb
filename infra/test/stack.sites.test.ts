import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ENTRY_POINTS } from '../images.js';
import { declaredContainer, declareDockerUnderMocks, exampleConfig, resolved, reveal, type RegisteredResource } from '../testing/pulumi-mocks.js';

/**
 * Policies for who runs as whom on the deployment path, read from the Pulumi program under the runtime
 * mocks. One root process is left there: each target's builder, which needs root to run every build
 * as the target's build user (docs/webhook.md, "Users and modes") and keeps only the capabilities
 * for that. The webhook and the egress proxy run as node, every site as its target's own uid.
 */

const CONTAINER = 'docker:index/container:Container';
const REPO_ROOT = join(import.meta.dirname, '..', '..');
let registered: RegisteredResource[];

beforeAll(async () => {
  const declaredStack = await declareDockerUnderMocks();
  registered = declaredStack.registered;
  const { webhook, proxy, api } = declaredStack.program.stack.containers;
  await Promise.all([webhook, proxy, api].map((c) => resolved(c.id)));
});

function declared(name: string) {
  const { inputs, env } = declaredContainer(registered, name);
  return {
    inputs,
    env,
    command: (reveal(inputs.command) as string[] | undefined) ?? [],
    volumes: (reveal(inputs.volumes) as { volumeName: string; containerPath: string; readOnly?: boolean }[] | undefined) ?? [],
  };
}

describe('who runs as whom on the deployment path', () => {
  it("a builder starts as root, because every build runs as its target's build user, and creates its target's two users with the stack's uids", () => {
    const builder = declared('builder-feature-de1');
    expect(builder.inputs.user).toBe('0');
    expect(builder.command).toEqual([...ENTRY_POINTS.builder]);
    expect(builder.env.BUILDER_SITE_USER).toBe('siteuser-feature-de1');
    expect(builder.env.BUILDER_BUILD_USER).toBe('builduser-feature-de1');
    expect(Number(builder.env.BUILDER_BUILD_UID)).toBe(Number(builder.env.BUILDER_SITE_UID) + 1);
  });

  it("a site runs as its target's site uid from the start (the group its builder opens the live release to); nothing inside switches users", () => {
    const builder = declared('builder-feature-de1');
    const site = declared('site-feature-de1');
    expect(site.inputs.user).toBe(`${builder.env.BUILDER_SITE_UID}:${builder.env.BUILDER_SITE_UID}`);
    expect(site.command).toEqual([...ENTRY_POINTS.site]);
    expect(site.env.SITES_ISOLATION).toBeUndefined();
  });

  it('the webhook runs as node from the start, so no launcher of its own is root; its deploys are requests to the builders', () => {
    const webhook = declared('webhook');
    expect(webhook.inputs.user).toBe('node');
    expect(webhook.env.WEBHOOK_USER).toBeUndefined();
    expect(webhook.env.DEPLOY_ISOLATION).toBe('none');
    expect(webhook.env.NODE_ENV).toBe('production');
    expect(declared('builder-main').env.BUILDER_SPOOL_OWNER).toBe('node');
  });

  it("a builder's restart command reaches its site's control socket, on the volume they alone share", () => {
    const builder = declared('builder-main');
    const site = declared('site-main');
    expect(site.env.SITES_CONTROL_SOCKET).toBe(`${builder.env.BUILDER_CONTROL_DIR}/control.sock`);
    const control = (c: ReturnType<typeof declared>) => c.volumes.find((v) => v.containerPath === builder.env.BUILDER_CONTROL_DIR)?.volumeName;
    expect(control(site)).toBe('geodata-site-control-main');
    expect(control(builder)).toBe(control(site));
  });

  it('the webhook runs the command of its image (webhook.Dockerfile CMD), whose default user is node', () => {
    expect(declared('webhook').command).toEqual([]);
    const dockerfile = readFileSync(join(REPO_ROOT, 'infra/docker/webhook.Dockerfile'), 'utf8');
    const cmd = /^CMD (\[.*\])$/m.exec(dockerfile)?.[1];
    expect(JSON.parse(cmd ?? 'null')).toEqual([...ENTRY_POINTS.webhook]);
    expect(dockerfile).toMatch(/^USER node$/m);
  });
});

describe('what each site is told, and how its server reaches the platform', () => {
  const domains = exampleConfig().domains as Record<string, string>;
  const siteEnv = (name: string) =>
    Object.fromEntries(Object.entries(declared(name).env).filter(([k]) => k.startsWith('SITE_ENV_')).map(([k, v]) => [k.slice('SITE_ENV_'.length), v]));

  it.each(['site-main', 'site-develop'])('%s (the web app) is told the API, Kratos, its login and GeoServer\'s WMS at their public names, and its own address', (name) => {
    const target = name.slice('site-'.length);
    expect(siteEnv(name)).toEqual({
      API_PUBLIC_URL: `https://${domains.api}`,
      PUBLIC_BASE_URL: `https://${target}.sites.example.org`,
      KRATOS_PUBLIC_URL: `https://${domains.kratos}`,
      LOGIN_URL: `https://${domains.kratos}/self-service/login/browser`,
      LOGOUT_URL: `https://${domains.hydra}/oauth2/sessions/logout`,
      WMS_URL: `https://${domains.geo}/geoserver/wms`,
    });
  });

  it('a preview site learns where the API is, and nothing of sign-in', () => {
    const env = siteEnv('site-feature-de1');
    expect(env).toEqual({ API_PUBLIC_URL: `https://${domains.api}`, PUBLIC_BASE_URL: 'https://de1.example-preview.net' });
  });

  it('on each site\'s network the proxy answers for the public names that site calls (the API; Kratos for the platform\'s sites only), so its server takes the proxy\'s routes and limits', () => {
    const proxy = registered.find((r) => r.type === CONTAINER && r.name === 'proxy')!;
    const attachments = (reveal(proxy.inputs.networksAdvanced) as { name: string; aliases?: string[] }[]).filter((a) => a.name.startsWith('geodata-site-'));
    const aliasesOn = (dp: string) => attachments.find((a) => a.name === `geodata-site-${dp}`)?.aliases;
    expect(aliasesOn('main')).toEqual([domains.api, domains.kratos]);
    expect(aliasesOn('develop')).toEqual([domains.api, domains.kratos]);
    expect(aliasesOn('feature-de1')).toEqual([domains.api]);
  });

  it('the API lets the platform\'s sites call it with credentials (CORS), and no preview site', () => {
    const origins = (declared('api').env.CORS_ORIGINS ?? '').split(',');
    expect(origins).toEqual(expect.arrayContaining(['https://main.sites.example.org', 'https://develop.sites.example.org']));
    expect(origins.some((o) => o.includes('example-preview.net'))).toBe(false);
  });
});
