import * as docker from '@pulumi/docker';
import type { StackContext } from './common.js';
import { stackTargets, type StackTarget } from './targets.js';

/**
 * The Docker networks and volumes of the stack.
 *
 * Networks
 *   edge          the proxy only; publishes 80 and 443; has a route out (ACME).
 *   app           internal. The platform's services talk to each other here; nothing on it reaches the internet.
 *   admin         internal. Kratos 4434 and Hydra 4445 listen on their fixed addresses in this network and
 *                 nowhere else; only the API, the login app, the clients-sync job and Hydra join it.
 *   egress        a plain bridge for Kratos (SMTP). No site, builder or webhook is on it.
 *   geo           internal. GeoServer, the features database, the provisioning job and the proxy: GeoServer's
 *                 REST API and web admin are reachable from nothing else (the proxy guards them by address).
 *   hooks         internal. The webhook server and the proxy, nothing else.
 *   site-<dp>     internal, one per deploy target, a /28 of sitesSubnet (outside internalCidrs): that
 *                 target's site container and the proxy, nothing else. Code from team pushes has no path
 *                 to a database, GeoServer, Ory, the webhook or another target's site.
 *   build-<dp>    internal, one per deploy target: that target's builder and the egress proxy, nothing else.
 *   worker-out    a plain bridge with the QC worker alone on it: the way out for approvals (SMTP, the OSM API,
 *                 Overpass, Wikibase, the agency). The API and the databases stay on internal networks.
 *   outbound      a plain bridge with the egress proxy alone on it: the only way out for builds, and only
 *                 to the package registry (and, for the builder's own git fetch, the targets' git hosts).
 */
export function declareNetwork({ cfg, n }: StackContext) {
  const label = (name: string) => [{ label: 'platform.network', value: name }];
  const targets = stackTargets(cfg.targets, cfg.sitesSubnet);
  const networks = {
    edge: new docker.Network('edge', { name: n('edge'), internal: false, ipamConfigs: [{ subnet: cfg.edgeSubnet }], labels: label('edge') }),
    app: new docker.Network('app', { name: n('app'), internal: true, labels: label('app') }),
    admin: new docker.Network('admin', { name: n('admin'), internal: true, ipamConfigs: [{ subnet: cfg.adminSubnet }], labels: label('admin') }),
    egress: new docker.Network('egress', { name: n('egress'), internal: false, labels: label('egress') }),
    geo: new docker.Network('geo', { name: n('geo'), internal: true, labels: label('geo') }),
    hooks: new docker.Network('hooks', { name: n('hooks'), internal: true, labels: label('hooks') }),
    workerOut: new docker.Network('worker-out', { name: n('worker-out'), internal: false, labels: label('worker-out') }),
    outbound: new docker.Network('outbound', { name: n('outbound'), internal: false, labels: label('outbound') }),
  };
  const perTarget = (t: StackTarget) => ({
    site: new docker.Network(t.siteNetwork, {
      name: n(t.siteNetwork),
      internal: true,
      ipamConfigs: [{ subnet: t.siteSubnet }],
      labels: [...label('site'), { label: 'platform.target', value: t.target.key }],
    }),
    build: new docker.Network(t.buildNetwork, {
      name: n(t.buildNetwork),
      internal: true,
      labels: [...label('build'), { label: 'platform.target', value: t.target.key }],
    }),
  });

  // Volumes holding data survive `pulumi destroy` (retainOnDelete): tearing the stack down must not
  // delete the databases, the backups or the certificates. docs/infra.md says how to remove them.
  const volume = (name: string, holdsData: boolean) =>
    new docker.Volume(name, { name: n(name), labels: [{ label: 'platform.volume', value: name }] }, { retainOnDelete: holdsData });
  const volumes = {
    featuresDb: volume('features-db-data', true),
    identityDb: volume('identity-db-data', true),
    geoserverData: volume('geoserver-data', true),
    caddyData: volume('caddy-data', true),
    caddyConfig: volume('caddy-config', false),
    webhookState: volume('webhook-state', true),
    apiData: volume('api-data', true),
    backups: volume('backups', true),
  };
  const declaredTargets = targets.map((t) => ({
    ...t,
    networks: perTarget(t),
    volumes: { site: volume(t.siteVolume, true), control: volume(t.controlVolume, false), spool: volume(t.spoolVolume, true) },
  }));
  return { networks, volumes, targets: declaredTargets };
}

export type StackNetwork = ReturnType<typeof declareNetwork>;
