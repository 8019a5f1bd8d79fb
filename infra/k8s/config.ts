import * as pulumi from '@pulumi/pulumi';
import { z } from 'zod';

/**
 * The Kubernetes target's own settings (`pulumi config set --path kubernetes.<key> <value>`), read only
 * when `target` is `kubernetes`. Everything else (domains, identity, targets, secrets, exports) is the
 * stack configuration both targets share (infra/config.ts). Validated like it: a wrong value stops
 * `pulumi preview` with the key's name.
 */

const cidr = z.string().regex(/^(\d{1,3}\.){3}\d{1,3}\/\d{1,2}$|^[0-9a-f:]+\/\d{1,3}$/i, 'a CIDR range such as 10.0.0.0/8');
const dnsLabel = z.string().regex(/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/, 'a DNS label (lower-case letters, digits, -)');
const quantity = z.string().regex(/^\d+(\.\d+)?(Ki|Mi|Gi|Ti)?$/, 'a size such as 20Gi');
const labelKey = z.string().regex(/^([a-z0-9.-]{1,253}\/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$/, 'a label key such as geodata.example.org/pool');

export const KubernetesSettingsSchema = z
  .object({
    /**
     * Registry (and path) the project images are pushed to by the build outside the cluster
     * (docs/infra.md "Kubernetes: images and builds"): `<registry>/<name>:<imageTag>-<content hash>`.
     */
    registry: z.string().regex(/^[a-z0-9.-]+(:\d+)?(\/[a-z0-9._-]+)*$/, 'a registry path such as registry.example.org/geodata'),
    /** Image pull secret in each namespace (created by the operator), when the registry needs credentials. */
    imagePullSecret: dnsLabel.optional(),
    /** StorageClass of every volume (the databases, GeoServer's data directory); the cluster's default when unset. */
    storageClass: dnsLabel.optional(),
    /** The IngressClass the Ingress is for (an ingress-nginx, Traefik, HAProxy … controller the cluster already runs). */
    ingressClassName: dnsLabel.default('nginx'),
    /** Namespace of the ingress controller: the only pods that may reach the edge proxy. */
    ingressNamespace: dnsLabel.default('ingress-nginx'),
    /**
     * Addresses of the ingress controller's pods: the edge proxy believes X-Forwarded-For only from these.
     * The cluster's pod range; the edge's NetworkPolicy lets nothing else in, so this may be broad.
     */
    trustedProxyCidrs: z.array(cidr).min(1).default(['10.0.0.0/8']),
    /** The Kubernetes API server's addresses: the CloudNativePG instance managers and the webhook's deploy driver talk to it. */
    apiServerCidrs: z.array(cidr).min(1),
    /** cert-manager ClusterIssuer the program creates (ACME, HTTP-01 through ingressClassName) and the Ingress names. */
    clusterIssuer: dnsLabel.default('geodata-letsencrypt'),
    /** ACME directory (Let's Encrypt's production one; its staging directory while trying things out). */
    acmeServer: z.string().url().startsWith('https://').default('https://acme-v02.api.letsencrypt.org/directory'),
    /** Namespace the CloudNativePG operator runs in (its pods reach the instances' status port). */
    cnpgNamespace: dnsLabel.default('cnpg-system'),
    /** PostgreSQL instances per database cluster (1 primary + replicas). */
    databaseInstances: z.number().int().min(1).max(9).default(3),
    featuresDbSize: quantity.default('20Gi'),
    identityDbSize: quantity.default('5Gi'),
    geoserverDataSize: quantity.default('5Gi'),
    /** The API's replicas: the HorizontalPodAutoscaler moves between these. */
    apiReplicas: z.object({ min: z.number().int().min(1).max(50), max: z.number().int().min(1).max(100) }).strict().default({ min: 2, max: 6 }),
    /** QC worker replicas (graphile-worker takes each job once, whatever the number). */
    workerReplicas: z.number().int().min(1).max(10).default(2),
    /** Replicas of each trusted branch site (main, develop); preview sites run one. */
    siteReplicas: z.number().int().min(1).max(10).default(2),
    /**
     * The dedicated node pool of untrusted code (preview sites and every build): its nodes carry the taint
     * `<previewTaintKey>=true:NoSchedule` and the label `<previewTaintKey>=true`; nothing of the platform
     * tolerates the taint, so no platform pod is ever scheduled beside team code.
     */
    previewTaintKey: labelKey.default('geodata.example.org/untrusted'),
    /** How long (days) CloudNativePG keeps base backups and WAL in the bucket. */
    backupRetentionDays: z.number().int().min(1).max(3650).default(30),
  })
  .strict()
  .superRefine((s, ctx) => {
    if (s.apiReplicas.max < s.apiReplicas.min) ctx.addIssue({ code: 'custom', path: ['apiReplicas', 'max'], message: 'must be at least apiReplicas.min' });
  });

export type KubernetesSettings = z.infer<typeof KubernetesSettingsSchema>;

/** `kubernetes`, read apart from StackConfigSchema: only the Kubernetes target needs it, and it has required keys. */
export function loadKubernetesSettings(config: pulumi.Config = new pulumi.Config()): KubernetesSettings {
  const raw = config.getObject<unknown>('kubernetes');
  if (raw === undefined) throw new Error('invalid stack configuration: target kubernetes needs the key kubernetes (docs/infra.md "Kubernetes: quick start")');
  const parsed = KubernetesSettingsSchema.safeParse(raw);
  if (!parsed.success) {
    const detail = parsed.error.issues.map((i) => `kubernetes.${i.path.map(String).join('.')}: ${i.message}`).join('; ');
    throw new Error(`invalid stack configuration: ${detail}`);
  }
  return parsed.data;
}
