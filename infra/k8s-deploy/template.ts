import { z } from 'zod';

/**
 * A target's build Job template (infra/k8s/sites.ts buildJobTemplate, stored by the program as the
 * ConfigMap `build-<dp>` in the builds namespace, key `job.json`) and where its site runs (key
 * `site.json`), and the Job of one deploy made from them.
 *
 * Placeholders: `$(BRANCH)`, `$(COMMIT)` and `$(LIVE_COMMIT)` (the commit the site runs now, empty when
 * none). They may stand only in a container's command, args and env values: the fields where the
 * kubelet itself expands `$(NAME)`. So each `$` of a filled-in value is written `$$` (the kubelet's
 * escape): a branch named `$(EGRESS_GIT_TOKEN)` stays that text and never becomes the credential the
 * fetch step holds. A placeholder anywhere else makes the template unusable (the driver exits 2).
 */

export const PLACEHOLDERS = ['$(BRANCH)', '$(COMMIT)', '$(LIVE_COMMIT)'] as const;

const dnsLabel = z.string().regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/).max(63);

/** Where a target's site runs: `site.json` of the ConfigMap. */
export const SiteSchema = z
  .object({
    namespace: dnsLabel,
    deployment: dnsLabel,
    /** The container whose image a deploy sets. */
    container: dnsLabel,
    /** The image repository the publish step pushes to; a deploy runs `<image>:<commit>`. */
    image: z.string().regex(/^[a-z0-9.-]+(:\d+)?(\/[a-z0-9._-]+)+$/),
  })
  .strict();
export type Site = z.infer<typeof SiteSchema>;

type Json = Record<string, unknown>;

const containerSchema = z
  .object({
    name: dnsLabel,
    command: z.array(z.string()).optional(),
    args: z.array(z.string()).optional(),
    env: z.array(z.object({ name: z.string(), value: z.string().optional() }).loose()).optional(),
  })
  .loose();

/** The parts of a Job the driver reads or fills in; everything else passes as the program declared it. */
const JobTemplateSchema = z
  .object({
    apiVersion: z.literal('batch/v1'),
    kind: z.literal('Job'),
    metadata: z.object({ generateName: z.string().regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?-$/).max(62), namespace: dnsLabel }).loose(),
    spec: z
      .object({
        activeDeadlineSeconds: z.number().int().positive().max(86_400),
        backoffLimit: z.literal(0),
        template: z.object({ spec: z.object({ containers: z.array(containerSchema).min(1), initContainers: z.array(containerSchema).optional() }).loose() }).loose(),
      })
      .loose(),
  })
  .loose();

export interface JobTemplate {
  job: Json;
  /** The build's own deadline (the Job's activeDeadlineSeconds). */
  activeDeadlineSeconds: number;
  namespace: string;
  generateName: string;
  /** The pod's containers in the order they run: init containers first. */
  steps: string[];
}

export class TemplateError extends Error {
  constructor(message: string) {
    super(`the build Job template is unusable: ${message}`);
    this.name = 'TemplateError';
  }
}

/** The ConfigMap's two keys, checked. */
export function readTemplate(configMap: Json): { template: JobTemplate; site: Site } {
  const data = (configMap.data ?? {}) as Record<string, unknown>;
  const parse = (key: string): unknown => {
    const text = data[key];
    if (typeof text !== 'string') throw new TemplateError(`the ConfigMap has no ${key}`);
    try {
      return JSON.parse(text);
    } catch {
      throw new TemplateError(`${key} is not JSON`);
    }
  };
  const job = JobTemplateSchema.safeParse(parse('job.json'));
  if (!job.success) throw new TemplateError(`job.json: ${job.error.issues.map((i) => `${i.path.join('.')} ${i.message}`).join('; ')}`);
  const site = SiteSchema.safeParse(parse('site.json'));
  if (!site.success) throw new TemplateError(`site.json: ${site.error.issues.map((i) => `${i.path.join('.')} ${i.message}`).join('; ')}`);
  const spec = job.data.spec.template.spec;
  return {
    template: {
      job: job.data as Json,
      activeDeadlineSeconds: job.data.spec.activeDeadlineSeconds,
      namespace: job.data.metadata.namespace,
      generateName: job.data.metadata.generateName,
      steps: [...(spec.initContainers ?? []), ...spec.containers].map((c) => c.name),
    },
    site: site.data,
  };
}

export interface DeployIdentity {
  branch: string;
  commit: string;
  liveCommit: string | null;
  /** The webhook's deployment id (from DEPLOY_LOG), or a random one. */
  deploymentId: string;
  release: string;
}

/** The Job's name: the template's generateName, the commit's first 7 digits and 8 of the deploy id; at most 63 characters. */
export function jobName(template: Pick<JobTemplate, 'generateName'>, identity: Pick<DeployIdentity, 'commit' | 'deploymentId'>): string {
  const suffix = `${identity.commit.slice(0, 7)}-${identity.deploymentId.replace(/[^0-9a-f]/g, '').slice(0, 8)}`;
  const prefix = template.generateName.slice(0, 63 - suffix.length);
  return `${prefix}${suffix}`;
}

/** `$` doubled: the kubelet reads `$$` as one `$` and expands nothing in it. */
const literal = (value: string) => value.replaceAll('$', () => '$$');

/** The Job of one deploy: the template with its placeholders filled in, its name, and what it is for. */
export function instantiate(template: JobTemplate, identity: DeployIdentity): Json {
  const job = structuredClone(template.job) as Json & { metadata: Json; spec: { template: { spec: { containers: Json[]; initContainers?: Json[] } } } };
  const values: Record<(typeof PLACEHOLDERS)[number], string> = {
    '$(BRANCH)': literal(identity.branch),
    '$(COMMIT)': identity.commit,
    '$(LIVE_COMMIT)': identity.liveCommit ?? '',
  };
  // A function, not a string, as the replacement: a `$&` or `$$` in a branch name is text, not a pattern.
  const fill = (text: string) => PLACEHOLDERS.reduce((out, p) => out.replaceAll(p, () => values[p]), text);
  const podSpec = job.spec.template.spec;
  for (const container of [...(podSpec.initContainers ?? []), ...podSpec.containers]) {
    for (const key of ['command', 'args'] as const) {
      if (Array.isArray(container[key])) container[key] = (container[key] as string[]).map(fill);
    }
    if (Array.isArray(container.env)) container.env = (container.env as Json[]).map((e) => (typeof e.value === 'string' ? { ...e, value: fill(e.value) } : e));
  }
  const left = PLACEHOLDERS.filter((p) => JSON.stringify(job).includes(p));
  if (left.length) throw new TemplateError(`${left.join(', ')} outside a container's command, args or env values`);
  const { generateName: _generated, ...metadata } = job.metadata;
  job.metadata = {
    ...metadata,
    name: jobName(template, identity),
    annotations: {
      ...((metadata.annotations as Record<string, string> | undefined) ?? {}),
      'geodata.example.org/branch': identity.branch,
      'geodata.example.org/commit': identity.commit,
      'geodata.example.org/deployment-id': identity.deploymentId,
      'geodata.example.org/release': identity.release,
    },
  };
  return job;
}
