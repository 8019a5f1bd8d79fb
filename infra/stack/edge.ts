import type * as docker from '@pulumi/docker';
import type * as pulumi from '@pulumi/pulumi';
import { renderCaddyfile } from '../caddy.js';
import { service } from '../containers.js';
import { proxyRoutes, siteUpstreamNames } from '../routes.js';
import { fileUpload, LIMITS, wgetCheck, type StackContext } from './common.js';
import type { StackImages } from './images.js';
import type { StackNetwork } from './network.js';

/**
 * The reverse proxy: the only container that publishes ports (80, 443), created last, and only once
 * every one-shot job has succeeded (`jobsSucceeded` rejects with the failed job's name otherwise).
 */
export function declareEdge(ctx: StackContext, { networks, volumes, targets }: StackNetwork, images: StackImages, jobsSucceeded: pulumi.Output<string>, upstreams: docker.Container[]) {
  const { cfg, n } = ctx;
  const routes = proxyRoutes(cfg.domains, cfg.targets, { selfServiceUi: cfg.selfServiceUi });
  const caddyfile = renderCaddyfile({ acmeEmail: cfg.acmeEmail, internalCidrs: cfg.internalCidrs, routes });
  const proxy = service('proxy', n('proxy'), {
    image: images.remote.caddy.imageId,
    limits: LIMITS.proxy,
    networks: [
      { network: networks.edge, aliases: ['proxy'] },
      { network: networks.app },
      { network: networks.geo },
      { network: networks.hooks },
      // Each target's site network: the proxy is the only other member, and answers there for the
      // public names the site's server calls (the API; for a platform site Kratos too), so that
      // a site reaches them through the proxy's routes and limits like a browser does, and nothing else.
      ...targets.map((t) => ({ network: t.networks.site, aliases: siteUpstreamNames(cfg.domains, t.target, cfg.parentDomain) })),
    ],
    ports: [
      { internal: 80, external: 80, protocol: 'tcp' },
      { internal: 443, external: 443, protocol: 'tcp' },
      { internal: 443, external: 443, protocol: 'udp' },
    ],
    uploads: [fileUpload('/etc/caddy/Caddyfile', caddyfile)],
    volumes: [
      { volumeName: volumes.caddyData.name, containerPath: '/data' },
      { volumeName: volumes.caddyConfig.name, containerPath: '/config' },
    ],
    healthcheck: { test: wgetCheck('http://127.0.0.1:2019/config/'), interval: '30s' },
    labels: { 'platform.after': jobsSucceeded },
    dependsOn: upstreams,
  });
  return { containers: { proxy }, routes, caddyfile };
}
