import * as k8s from '@pulumi/kubernetes';
import type * as pulumi from '@pulumi/pulumi';
import { createHash } from 'node:crypto';
import { renderCaddyfile, type ProxyRoute } from '../caddy.js';
import { proxyRoutes, UPSTREAMS } from '../routes.js';
import { LIMITS } from '../stack/common.js';
import { allow, container, labels, PART_OF, podSpec, type K8sContext, type Peer } from './common.js';
import { ORY_SERVICES } from './identity.js';
import type { K8sImages } from './images.js';

/**
 * The edge on Kubernetes: the same reverse proxy as on Docker (Caddy with the Caddyfile rendered from
 * the same routes, infra/routes.ts and infra/caddy.ts: the admin paths, GeoServer's guarded paths, the
 * forward authentication of WFS-T writes, the Kratos gate, the paths in plain form only), behind an
 * Ingress that terminates TLS with cert-manager's certificates.
 *
 *   client ─TLS─▶ ingress controller (the cluster's) ─▶ edge (Caddy, HTTP :8080) ─▶ Services
 *
 * The Ingress sends every host to the edge and nothing else: no Ingress names an API, a site, GeoServer
 * or an admin Service directly, so every rule of the Caddyfile applies on this target too. The edge
 * reads the client address from X-Forwarded-For, believed only from the ingress controller
 * (trustedProxyCidrs; its NetworkPolicy lets no one else in). Admin APIs (Kratos 4434, Hydra 4445) are
 * no route of the edge and no host of the Ingress: inside the cluster only.
 */

export const EDGE_PORT = 8080;

/** A route's upstream `host:port` as the Docker network names it → the Service that answers on this target. */
export function kubernetesUpstream(upstream: string, siteServices: Record<string, string>): string {
  const [host = '', port = ''] = upstream.split(':');
  const renamed: Record<string, string> = { [UPSTREAMS.kratosPublic.host]: ORY_SERVICES.kratosPublic, [UPSTREAMS.hydraPublic.host]: ORY_SERVICES.hydraPublic, ...siteServices };
  return `${renamed[host] ?? host}:${port}`;
}

export function kubernetesRoutes(ctx: K8sContext, siteServices: Record<string, string>): ProxyRoute[] {
  const { cfg } = ctx;
  return proxyRoutes(cfg.domains, cfg.targets, { selfServiceUi: cfg.selfServiceUi }).map((route) => ({
    ...route,
    upstream: kubernetesUpstream(route.upstream, siteServices),
    ...(route.gate ? { gate: { ...route.gate, upstream: kubernetesUpstream(route.gate.upstream, siteServices) } } : {}),
    ...(route.forwardAuth ? { forwardAuth: { ...route.forwardAuth, upstream: kubernetesUpstream(route.forwardAuth.upstream, siteServices) } } : {}),
  }));
}

export function declareEdge(
  ctx: K8sContext,
  images: K8sImages,
  sites: { upstreams: Record<string, string>; sites: { t: { siteHost: string; target: { port: number } }; namespace: string }[] },
  gates: pulumi.Resource[],
) {
  const { cfg, ns, k8s: settings } = ctx;
  const namespace = ns.platform;
  const routes = kubernetesRoutes(ctx, sites.upstreams);
  const caddyfile = renderCaddyfile({ acmeEmail: cfg.acmeEmail, internalCidrs: cfg.internalCidrs, routes, behindTlsFront: { port: EDGE_PORT, trustedProxies: settings.trustedProxyCidrs } });
  const config = new k8s.core.v1.ConfigMap('edge', {
    metadata: { name: 'edge', namespace, labels: labels('edge') },
    data: { Caddyfile: caddyfile },
  });
  const edgeLabels = labels('edge');
  const caddyUid = 65532;
  const deployment = new k8s.apps.v1.Deployment(
    'edge',
    {
      metadata: { name: 'edge', namespace, labels: edgeLabels },
      spec: {
        replicas: 2,
        selector: { matchLabels: { 'app.kubernetes.io/name': 'edge' } },
        template: {
          metadata: { labels: edgeLabels, annotations: { 'geodata.example.org/caddyfile-sha256': createHash('sha256').update(caddyfile).digest('hex') } },
          spec: podSpec({
            ctx,
            containers: [
              {
                ...container({
                  name: 'caddy',
                  image: images.thirdParty.caddy,
                  limits: LIMITS.proxy,
                  uid: caddyUid,
                  ports: [{ name: 'http', port: EDGE_PORT }],
                  probe: { tcp: EDGE_PORT },
                  volumeMounts: [
                    { name: 'caddyfile', mountPath: '/etc/caddy', readOnly: true },
                    { name: 'state', mountPath: '/state' },
                  ],
                }),
                command: ['caddy', 'run', '--config', '/etc/caddy/Caddyfile', '--adapter', 'caddyfile'],
                env: [
                  { name: 'XDG_DATA_HOME', value: '/state/data' },
                  { name: 'XDG_CONFIG_HOME', value: '/state/config' },
                ],
              },
            ],
            volumes: [
              { name: 'caddyfile', configMap: { name: config.metadata.name } },
              { name: 'state', emptyDir: { sizeLimit: '64Mi' } },
            ],
          }),
        },
      },
    },
    // The entrance opens once every Job (migrations, clients sync, provisioning) has completed.
    { dependsOn: [config, ...gates] },
  );
  const service = new k8s.core.v1.Service('edge', {
    metadata: { name: 'edge', namespace, labels: edgeLabels },
    spec: { selector: { 'app.kubernetes.io/name': 'edge' }, ports: [{ name: 'http', port: EDGE_PORT, targetPort: EDGE_PORT, protocol: 'TCP' }] },
  });
  const pdb = new k8s.policy.v1.PodDisruptionBudget('edge', {
    metadata: { name: 'edge', namespace, labels: edgeLabels },
    spec: { minAvailable: 1, selector: { matchLabels: { 'app.kubernetes.io/name': 'edge' } } },
  });

  const issuer = new k8s.apiextensions.CustomResource('cluster-issuer', {
    apiVersion: 'cert-manager.io/v1',
    kind: 'ClusterIssuer',
    metadata: { name: settings.clusterIssuer, labels: PART_OF },
    spec: {
      acme: {
        email: cfg.acmeEmail,
        server: settings.acmeServer,
        privateKeySecretRef: { name: `${settings.clusterIssuer}-account` },
        solvers: [{ http01: { ingress: { ingressClassName: settings.ingressClassName } } }],
      },
    },
  });
  const hosts = routes.map((r) => r.domain.toLowerCase());
  const ingress = new k8s.networking.v1.Ingress(
    'edge',
    {
      metadata: {
        name: 'edge',
        namespace,
        labels: edgeLabels,
        annotations: {
          'cert-manager.io/cluster-issuer': settings.clusterIssuer,
          // ingress-nginx: imports upload files; other controllers ignore the key.
          'nginx.ingress.kubernetes.io/proxy-body-size': '64m',
        },
      },
      spec: {
        ingressClassName: settings.ingressClassName,
        tls: hosts.map((host) => ({ hosts: [host], secretName: `tls-${host.replace(/\./g, '-')}` })),
        rules: hosts.map((host) => ({
          host,
          http: { paths: [{ path: '/', pathType: 'Prefix', backend: { service: { name: 'edge', port: { number: EDGE_PORT } } } }] },
        })),
      },
    },
    { dependsOn: [deployment, service, issuer] },
  );

  const upstreamPorts = [UPSTREAMS.api, UPSTREAMS.geoserver, UPSTREAMS.login, UPSTREAMS.accountsUi, UPSTREAMS.webhook].map((u) => ({ pods: u.host, port: u.port }));
  const sitePeers: { peer: Peer; port: number }[] = sites.sites.map((s) => ({ peer: { pods: s.t.siteHost, namespace: s.namespace }, port: s.t.target.port }));
  const policy = allow('edge', namespace, { 'app.kubernetes.io/name': 'edge' }, {
    // The ingress controller, and nothing else.
    ingress: [{ peers: [{ namespace: settings.ingressNamespace }], ports: [EDGE_PORT] }],
    egress: [
      ...upstreamPorts.map((u) => ({ peers: [{ pods: u.pods }], ports: [u.port] })),
      { peers: [{ pods: 'kratos' }], ports: [UPSTREAMS.kratosPublic.port] },
      { peers: [{ pods: 'hydra' }], ports: [UPSTREAMS.hydraPublic.port] },
      ...sitePeers.map((s) => ({ peers: [s.peer], ports: [s.port] })),
    ],
  });

  return { deployment, service, pdb, config, issuer, ingress, policies: [policy], routes, caddyfile };
}
