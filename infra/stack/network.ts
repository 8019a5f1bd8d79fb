import * as docker from '@pulumi/docker';
import type { StackContext } from './common.js';

/**
 * The Docker networks and volumes of the stack.
 *
 * Networks
 *   edge          the proxy only; publishes 80 and 443; has a route out (ACME).
 *   app           internal. The platform's services talk to each other here; nothing on it reaches the internet.
 *   admin         internal. Kratos 4434 and Hydra 4445 listen on their fixed addresses in this network and
 *                 nowhere else; only the API, the login app, the clients-sync job and Hydra join it.
 *   egress        a plain bridge for Kratos (SMTP). The sites container is NOT on it.
 *   geo           internal. GeoServer, the features database, the provisioning job and the proxy: GeoServer's
 *                 REST API and web admin are reachable from nothing else (the proxy guards them by address).
 *   sites         internal, fixed subnet outside internalCidrs. The branch sites run code from team pushes:
 *                 this network holds the sites container (and the webhook in its namespace) and the proxy,
 *                 nothing else, so that code has no path to a database, GeoServer or Ory.
 *   sites-egress  a plain bridge with the sites container alone on it (git clone, npm ci of the webhook).
 */
export function declareNetwork({ cfg, n }: StackContext) {
  const label = (name: string) => [{ label: 'platform.network', value: name }];
  const networks = {
    edge: new docker.Network('edge', { name: n('edge'), internal: false, ipamConfigs: [{ subnet: cfg.edgeSubnet }], labels: label('edge') }),
    app: new docker.Network('app', { name: n('app'), internal: true, labels: label('app') }),
    admin: new docker.Network('admin', { name: n('admin'), internal: true, ipamConfigs: [{ subnet: cfg.adminSubnet }], labels: label('admin') }),
    egress: new docker.Network('egress', { name: n('egress'), internal: false, labels: label('egress') }),
    geo: new docker.Network('geo', { name: n('geo'), internal: true, labels: label('geo') }),
    sites: new docker.Network('sites', { name: n('sites'), internal: true, ipamConfigs: [{ subnet: cfg.sitesSubnet }], labels: label('sites') }),
    sitesEgress: new docker.Network('sites-egress', { name: n('sites-egress'), internal: false, labels: label('sites-egress') }),
  };

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
    deployRoot: volume('deploy-root', true),
    sitesControl: volume('sites-control', false),
    webhookState: volume('webhook-state', true),
    apiData: volume('api-data', true),
    backups: volume('backups', true),
  };
  return { networks, volumes };
}

export type StackNetwork = ReturnType<typeof declareNetwork>;
