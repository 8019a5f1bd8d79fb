import * as k8s from '@pulumi/kubernetes';
import { PART_OF, type K8sContext } from './common.js';

/**
 * The Kubernetes target's "network" part: where the Docker target has networks (infra/stack/network.ts),
 * this one has namespaces and NetworkPolicies. Four namespaces, each enforcing the restricted Pod
 * Security level and each starting from a NetworkPolicy that denies every connection in and out; the
 * parts then allow, workload by workload, exactly the connections the Docker networks allow
 * (infra/k8s/common.ts `allow`). The one thing every pod may do is ask the cluster's DNS.
 *
 *   <prefix>          the platform: edge, API, worker, GeoServer, identity, databases, webhook
 *   <prefix>-sites    the trusted branch sites (main, develop: the platform's own web app)
 *   <prefix>-preview  the preview sites of team branches: untrusted code, on the tainted node pool,
 *                     no service-account token, no way out but DNS and the public entrance
 *   <prefix>-builds   every site build (a Job per deploy): untrusted code, on the tainted node pool,
 *                     reaching only the package registry and the image registry
 */
export function declareNamespaces(ctx: K8sContext) {
  const { ns } = ctx;
  const namespace = (name: string, trust: 'platform' | 'trusted-sites' | 'untrusted') =>
    new k8s.core.v1.Namespace(name, {
      metadata: {
        name,
        labels: {
          ...PART_OF,
          'geodata.example.org/trust': trust,
          // The API server itself refuses a pod that breaks the restricted profile (root, privilege
          // escalation, host namespaces, capabilities, a missing seccomp profile), whoever creates it.
          'pod-security.kubernetes.io/enforce': 'restricted',
          'pod-security.kubernetes.io/enforce-version': 'v1.33',
          'pod-security.kubernetes.io/audit': 'restricted',
          'pod-security.kubernetes.io/warn': 'restricted',
        },
      },
    });
  const namespaces = {
    platform: namespace(ns.platform, 'platform'),
    sites: namespace(ns.sites, 'trusted-sites'),
    preview: namespace(ns.preview, 'untrusted'),
    builds: namespace(ns.builds, 'untrusted'),
  };
  const policies = (Object.keys(namespaces) as (keyof typeof namespaces)[]).flatMap((key) => {
    const name = ns[key];
    const opts = { dependsOn: [namespaces[key]] };
    return [
      new k8s.networking.v1.NetworkPolicy(
        `default-deny-${name}`,
        {
          metadata: { name: 'default-deny', namespace: name, labels: PART_OF },
          // Every pod of the namespace, nothing in, nothing out.
          spec: { podSelector: {}, policyTypes: ['Ingress', 'Egress'] },
        },
        opts,
      ),
      new k8s.networking.v1.NetworkPolicy(
        `allow-dns-${name}`,
        {
          metadata: { name: 'allow-dns', namespace: name, labels: PART_OF },
          spec: {
            podSelector: {},
            policyTypes: ['Egress'],
            egress: [
              {
                to: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } }, podSelector: { matchLabels: { 'k8s-app': 'kube-dns' } } }],
                ports: [
                  { port: 53, protocol: 'UDP' },
                  { port: 53, protocol: 'TCP' },
                ],
              },
            ],
          },
        },
        opts,
      ),
    ];
  });
  return { namespaces, policies };
}

export type K8sNamespaces = ReturnType<typeof declareNamespaces>;
