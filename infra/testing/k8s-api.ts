import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Validators } from '../k8s/schemas/validate.js';

/**
 * A Kubernetes API server double on loopback, over TLS with its own CA, for the deploy driver
 * (infra/k8s-deploy): the endpoints the driver uses and what a real API server, its RBAC authorizer,
 * the Job controller, the kubelet and the Deployment controller would do with them, at test speed.
 *
 *   GET    /api/v1/namespaces/:ns/configmaps/:name
 *   POST   /apis/batch/v1/namespaces/:ns/jobs                 → a pod runs the Job's steps (Scenario.build)
 *   GET    /apis/batch/v1/namespaces/:ns/jobs/:name
 *   DELETE /apis/batch/v1/namespaces/:ns/jobs/:name           (propagationPolicy: Background removes the pods)
 *   GET    /api/v1/namespaces/:ns/pods?labelSelector=k=v,…
 *   GET    /api/v1/namespaces/:ns/pods/:name/log?container=&follow=&limitBytes=&tailLines=
 *   GET    /apis/apps/v1/namespaces/:ns/deployments/:name
 *   PATCH  /apis/apps/v1/namespaces/:ns/deployments/:name     JSON patch or JSON merge patch → a rollout
 *
 * What it refuses as the real one does: no or a wrong bearer token (401); whatever the given RBAC rules
 * (the Roles bound to the caller) do not allow, resourceNames included (403, the authorizer's message);
 * an object or patch result the pinned Kubernetes models refuse, unknown fields included, as
 * fieldValidation=Strict does (422, via infra/k8s/schemas/validate.ts, the schema test's validators);
 * a Job name that is not a DNS label of at most 63 characters, or taken (409); a namespace in the body
 * other than the request's (400); a failing JSON-patch `test` (422); a changed selector (422);
 * a log of a container that has not started (400) or without `container` in a pod of several (400);
 * a label selector it cannot parse (400). A Deployment's new image becomes available only when a
 * completed Job's publish step pushed it (or it is the image it started with), as a kubelet that
 * cannot pull an image never makes the pod ready.
 */

export type Json = Record<string, unknown>;

export interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
  resourceNames?: string[];
}

export interface BuildStep {
  exitCode: number;
  log: string;
}

export interface Scenario {
  /** How each step (container name) of a created Job ends; a step not named succeeds with a line of log. */
  build?: (job: Json) => Record<string, BuildStep>;
  /** Overrides whether a rollout to `image` becomes available. */
  rollout?: (image: string) => 'available' | 'stuck' | undefined;
  /** How long a build step or a rollout step takes. */
  stepMs?: number;
}

export interface RecordedRequest {
  method: string;
  path: string;
  verb: string;
  resource: string;
  namespace: string;
  name: string | undefined;
  status: number;
  contentType: string | undefined;
  body: unknown;
}

export interface KubeApiDouble {
  url: string;
  caFile: string;
  tokenFile: string;
  requests: RecordedRequest[];
  /** RBAC rules by namespace (mutable: a test may take a rule away). */
  rules: Map<string, PolicyRule[]>;
  object(resource: 'configmaps' | 'deployments' | 'jobs' | 'pods', namespace: string, name: string): Json | undefined;
  list(resource: 'configmaps' | 'deployments' | 'jobs' | 'pods', namespace: string): Json[];
  /** Images that a completed Job's publish step pushed. */
  published: Set<string>;
  close(): Promise<void>;
}

export interface DoubleOptions {
  /** The objects the API starts with (ConfigMaps and Deployments as the Pulumi program declares them). */
  objects: Json[];
  /** RBAC: what the caller's Roles allow, by namespace. */
  rules: Map<string, PolicyRule[]>;
  /** Who the caller is, for the authorizer's messages. */
  user: string;
  validators: Validators;
  scenario?: Scenario;
}

/** A self-signed certificate for 127.0.0.1 (openssl), its own CA. */
export function loopbackCertificate(dir = mkdtempSync(join(tmpdir(), 'kube-api-'))): { key: string; cert: string; certFile: string } {
  const keyFile = join(dir, 'key.pem');
  const certFile = join(dir, 'cert.pem');
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', keyFile, '-out', certFile, '-days', '2', '-subj', '/CN=kube-api-double', '-addext', 'subjectAltName=IP:127.0.0.1'],
    { stdio: 'ignore' },
  );
  return { key: readFileSync(keyFile, 'utf8'), cert: readFileSync(certFile, 'utf8'), certFile };
}

const RESOURCES: Record<string, { group: string; version: string; kind: string }> = {
  configmaps: { group: '', version: 'v1', kind: 'ConfigMap' },
  pods: { group: '', version: 'v1', kind: 'Pod' },
  jobs: { group: 'batch', version: 'v1', kind: 'Job' },
  deployments: { group: 'apps', version: 'v1', kind: 'Deployment' },
};

const PATH = /^\/(?:api\/v1|apis\/([a-z0-9.-]+)\/(v[0-9a-z]+))\/namespaces\/([a-z0-9-]+)\/([a-z]+)(?:\/([^/]+)(?:\/([a-z]+))?)?$/;
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const MAX_BODY = 3 * 1024 * 1024;

class ApiError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

const status = (code: number, reason: string, message: string) => ({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: code < 300 ? 'Success' : 'Failure', message, reason, code });

export async function startKubeApiDouble(options: DoubleOptions): Promise<KubeApiDouble> {
  // The certificate, its key and the token in one folder of this double's, removed by close().
  const dir = mkdtempSync(join(tmpdir(), 'kube-api-'));
  const tls = loopbackCertificate(dir);
  const token = randomBytes(24).toString('base64url');
  const tokenFile = join(dir, 'token');
  writeFileSync(tokenFile, `${token}\n`, { mode: 0o600 });
  const scenario = options.scenario ?? {};
  const stepMs = scenario.stepMs ?? 30;
  const store = new Map<string, Json>();
  const keyOf = (resource: string, namespace: string, name: string) => `${resource}/${namespace}/${name}`;
  const logs = new Map<string, string>();
  const published = new Set<string>();
  const initialImages = new Set<string>();
  const timers = new Set<NodeJS.Timeout>();
  const later = (ms: number, fn: () => void) => {
    const timer = setTimeout(() => {
      timers.delete(timer);
      fn();
    }, ms);
    timers.add(timer);
  };
  const waiters = new Set<() => void>();
  const changed = () => {
    for (const w of [...waiters]) w();
  };
  let resourceVersion = 1000;
  const nextVersion = () => String(++resourceVersion);

  for (const object of options.objects) {
    const copy = structuredClone(object) as Json & { metadata: Json; spec?: Json };
    const resource = Object.keys(RESOURCES).find((r) => RESOURCES[r]!.kind === copy.kind);
    if (!resource) throw new Error(`the double does not keep ${String(copy.kind)}`);
    copy.metadata = { ...copy.metadata, uid: randomBytes(8).toString('hex'), resourceVersion: nextVersion(), generation: 1, creationTimestamp: new Date().toISOString() };
    if (copy.kind === 'Deployment') {
      const replicas = Number((copy.spec as Json).replicas ?? 1);
      copy.status = { observedGeneration: 1, replicas, updatedReplicas: replicas, readyReplicas: replicas, availableReplicas: replicas };
      for (const c of containersOf(copy)) initialImages.add(String(c.image));
    }
    store.set(keyOf(resource, String(copy.metadata.namespace), String(copy.metadata.name)), copy);
  }

  const requests: RecordedRequest[] = [];

  function authorize(verb: string, group: string, resource: string, sub: string | undefined, namespace: string, name: string | undefined) {
    const full = sub ? `${resource}/${sub}` : resource;
    const allowed = (options.rules.get(namespace) ?? []).some(
      (rule) =>
        (rule.apiGroups.includes(group) || rule.apiGroups.includes('*')) &&
        (rule.resources.includes(full) || rule.resources.includes('*')) &&
        (rule.verbs.includes(verb) || rule.verbs.includes('*')) &&
        (!rule.resourceNames?.length || (name !== undefined && rule.resourceNames.includes(name))),
    );
    if (!allowed) {
      const kind = group ? `${resource}.${group}` : resource;
      throw new ApiError(403, 'Forbidden', `${kind}${name ? ` "${name}"` : ''} is forbidden: User "${options.user}" cannot ${verb} resource "${full}" in API group "${group}" in the namespace "${namespace}"`);
    }
  }

  function get(resource: string, namespace: string, name: string): Json {
    const found = store.get(keyOf(resource, namespace, name));
    if (!found) throw new ApiError(404, 'NotFound', `${resource}${RESOURCES[resource]!.group ? `.${RESOURCES[resource]!.group}` : ''} "${name}" not found`);
    return found;
  }

  function validate(object: Json, what: string) {
    const problem = options.validators.validate(object, what);
    if (problem) throw new ApiError(422, 'Invalid', `${what} is invalid: ${problem.errors.join('; ')}`);
  }

  // --- the Job controller and the kubelet, at test speed ---
  function runJob(job: Json & { metadata: Json; spec: Json }) {
    const namespace = String(job.metadata.namespace);
    const jobName = String(job.metadata.name);
    const template = (job.spec.template ?? {}) as { metadata?: { labels?: Record<string, string> }; spec: { initContainers?: Json[]; containers: Json[] } };
    const podName = `${jobName}-${randomBytes(3).toString('hex').slice(0, 5)}`;
    const steps = [...(template.spec.initContainers ?? []), ...template.spec.containers].map((c) => String(c.name));
    const inits = new Set((template.spec.initContainers ?? []).map((c) => String(c.name)));
    const outcome = scenario.build?.(job) ?? {};
    const pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {
        name: podName,
        namespace,
        uid: randomBytes(8).toString('hex'),
        resourceVersion: nextVersion(),
        labels: { ...(template.metadata?.labels ?? {}), 'batch.kubernetes.io/job-name': jobName, 'job-name': jobName, 'batch.kubernetes.io/controller-uid': String(job.metadata.uid) },
      },
      spec: structuredClone(template.spec),
      status: {
        phase: 'Pending',
        initContainerStatuses: [...inits].map((name) => ({ name, state: { waiting: { reason: 'PodInitializing' } } })),
        containerStatuses: template.spec.containers.map((c) => ({ name: String(c.name), state: { waiting: { reason: 'PodInitializing' } } })),
      },
    };
    store.set(keyOf('pods', namespace, podName), pod);
    job.status = { active: 1, startTime: new Date().toISOString() };
    const statusOf = (name: string) => [...pod.status.initContainerStatuses, ...pod.status.containerStatuses].find((s) => s.name === name)!;
    const finish = (ok: boolean, reason: string, message: string) => {
      if (!store.has(keyOf('jobs', namespace, jobName))) return;
      pod.status.phase = ok ? 'Succeeded' : 'Failed';
      const now = new Date().toISOString();
      job.status = {
        startTime: (job.status as Json).startTime,
        ...(ok ? { succeeded: 1, completionTime: now } : { failed: 1 }),
        conditions: ok
          ? [{ type: 'SuccessCriteriaMet', status: 'True', reason: 'CompletionsReached' }, { type: 'Complete', status: 'True', reason: 'CompletionsReached' }]
          : [{ type: 'FailureTarget', status: 'True', reason, message }, { type: 'Failed', status: 'True', reason, message }],
      };
      if (ok) {
        const publish = template.spec.containers.find((c) => c.name === 'publish');
        const args = (publish?.args ?? []) as string[];
        const tag = args[args.indexOf('--new_tag') + 1];
        if (tag) published.add(tag);
      }
      changed();
    };
    const run = (index: number) => {
      if (!store.has(keyOf('pods', namespace, podName))) return;
      const name = steps[index];
      if (name === undefined) return finish(true, '', '');
      const step = outcome[name] ?? { exitCode: 0, log: `${name}: done\n` };
      if (index === inits.size) pod.status.phase = 'Running';
      statusOf(name).state = { running: { startedAt: new Date().toISOString() } } as never;
      logs.set(`${namespace}/${podName}/${name}`, step.log);
      changed();
      later(stepMs, () => {
        statusOf(name).state = { terminated: { exitCode: step.exitCode, reason: step.exitCode === 0 ? 'Completed' : 'Error' } } as never;
        changed();
        if (step.exitCode !== 0) return finish(false, 'BackoffLimitExceeded', 'Job has reached the specified backoff limit');
        run(index + 1);
      });
    };
    later(stepMs, () => run(0));
  }

  // --- the Deployment controller ---
  function rollOut(deployment: Json & { metadata: Json; spec: Json }) {
    const generation = Number(deployment.metadata.generation);
    const want = Number(deployment.spec.replicas ?? 1);
    const before = (deployment.status ?? {}) as { availableReplicas?: number };
    const image = String(containersOf(deployment)[0]?.image ?? '');
    const verdict = scenario.rollout?.(image) ?? (published.has(image) || initialImages.has(image) ? 'available' : 'stuck');
    later(stepMs, () => {
      if (Number(deployment.metadata.generation) !== generation) return;
      const old = before.availableReplicas ?? 0;
      deployment.status =
        verdict === 'available' || want === 0
          ? {
              observedGeneration: generation,
              replicas: want,
              updatedReplicas: want,
              readyReplicas: want,
              availableReplicas: want,
              conditions: [
                { type: 'Available', status: 'True', reason: 'MinimumReplicasAvailable' },
                { type: 'Progressing', status: 'True', reason: 'NewReplicaSetAvailable' },
              ],
            }
          : {
              // One new pod that never becomes ready beside the old ones (maxUnavailable rounds down to 0).
              observedGeneration: generation,
              replicas: old + 1,
              updatedReplicas: 1,
              readyReplicas: old,
              availableReplicas: old,
              unavailableReplicas: 1,
              conditions: [{ type: 'Progressing', status: 'True', reason: 'ReplicaSetUpdated' }],
            };
      deployment.metadata.resourceVersion = nextVersion();
      changed();
    });
  }

  async function handle(req: IncomingMessage, res: ServerResponse, record: RecordedRequest): Promise<void> {
    const url = new URL(req.url ?? '/', 'https://127.0.0.1');
    const match = PATH.exec(url.pathname);
    if (!match) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    const [, group = '', version = 'v1', namespace = '', resource = '', name, sub] = match;
    const known = RESOURCES[resource];
    if (!known || known.group !== group || known.version !== version || (sub !== undefined && !(resource === 'pods' && sub === 'log'))) {
      throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    }
    const method = req.method ?? 'GET';
    const verb =
      method === 'GET' ? (name ? 'get' : url.searchParams.get('watch') === 'true' ? 'watch' : 'list') : method === 'POST' && !name ? 'create' : method === 'PATCH' && name ? 'patch' : method === 'PUT' && name ? 'update' : method === 'DELETE' ? (name ? 'delete' : 'deletecollection') : '';
    if (!verb) throw new ApiError(405, 'MethodNotAllowed', `${method} is not supported here`);
    Object.assign(record, { verb, resource: sub ? `${resource}/${sub}` : resource, namespace, name });

    const auth = req.headers.authorization ?? '';
    if (auth !== `Bearer ${token}`) throw new ApiError(401, 'Unauthorized', 'Unauthorized');
    authorize(verb, group, resource, sub, namespace, name ? decodeURIComponent(name) : undefined);

    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of req) {
      size += (chunk as Buffer).length;
      if (size > MAX_BODY) throw new ApiError(413, 'RequestEntityTooLarge', 'the request is too large');
      chunks.push(chunk as Buffer);
    }
    const text = Buffer.concat(chunks).toString('utf8');
    let body: unknown;
    if (text) {
      try {
        body = JSON.parse(text);
      } catch {
        throw new ApiError(400, 'BadRequest', 'the body is not JSON');
      }
    }
    record.body = body;
    record.contentType = req.headers['content-type'];
    const send = (code: number, object: unknown) => {
      record.status = code;
      res.writeHead(code, { 'content-type': 'application/json' }).end(JSON.stringify(object));
    };

    if (verb === 'get' && sub === 'log') return podLog(res, record, namespace, name!, url.searchParams);
    if (verb === 'get') return send(200, get(resource, namespace, name!));
    if (verb === 'list') {
      const selector = parseSelector(url.searchParams.get('labelSelector') ?? '');
      const items = [...store.entries()]
        .filter(([key]) => key.startsWith(`${resource}/${namespace}/`))
        .map(([, o]) => o)
        .filter((o) => Object.entries(selector).every(([k, v]) => ((o.metadata as Json).labels as Record<string, string> | undefined)?.[k] === v));
      return send(200, { kind: `${known.kind}List`, apiVersion: version === 'v1' && !group ? 'v1' : `${group}/${version}`, metadata: { resourceVersion: String(resourceVersion) }, items });
    }
    if (verb === 'create' && resource === 'jobs') {
      const job = body as Json & { metadata?: Json; spec?: Json };
      if (!job || typeof job !== 'object' || job.kind !== 'Job' || job.apiVersion !== 'batch/v1') throw new ApiError(400, 'BadRequest', 'the object is not a batch/v1 Job');
      const metadata = (job.metadata ?? {}) as Json;
      if (metadata.namespace !== undefined && metadata.namespace !== namespace) throw new ApiError(400, 'BadRequest', 'the namespace of the provided object does not match the namespace sent on the request');
      const jobName = metadata.name;
      if (typeof jobName !== 'string' || !DNS_LABEL.test(jobName) || jobName.length > 63) {
        throw new ApiError(422, 'Invalid', `Job.batch "${String(jobName)}" is invalid: metadata.name: Invalid value: must be no more than 63 characters and a lowercase RFC 1123 label`);
      }
      validate(job, `Job.batch "${jobName}"`);
      if (store.has(keyOf('jobs', namespace, jobName))) throw new ApiError(409, 'AlreadyExists', `jobs.batch "${jobName}" already exists`);
      const stored = { ...structuredClone(job), metadata: { ...metadata, namespace, uid: randomBytes(8).toString('hex'), resourceVersion: nextVersion(), generation: 1, creationTimestamp: new Date().toISOString() }, status: {} } as Json & { metadata: Json; spec: Json };
      store.set(keyOf('jobs', namespace, jobName), stored);
      runJob(stored);
      return send(201, stored);
    }
    if (verb === 'delete' && resource === 'jobs') {
      get('jobs', namespace, name!);
      store.delete(keyOf('jobs', namespace, name!));
      // Jobs deleted through the API orphan their pods unless a propagation policy says otherwise.
      const policy = url.searchParams.get('propagationPolicy') ?? ((body as Json | undefined)?.propagationPolicy as string | undefined) ?? 'Orphan';
      if (policy !== 'Orphan') {
        for (const [key, pod] of store) if (key.startsWith(`pods/${namespace}/`) && ((pod.metadata as Json).labels as Record<string, string>)['batch.kubernetes.io/job-name'] === name) store.delete(key);
      }
      changed();
      return send(200, status(200, '', `jobs.batch "${name}" deleted`));
    }
    if (verb === 'patch' && resource === 'deployments') {
      const current = get('deployments', namespace, name!) as Json & { metadata: Json; spec: Json };
      const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim();
      let next: Json;
      if (type === 'application/json-patch+json') next = applyJsonPatch(current, body);
      else if (type === 'application/merge-patch+json') next = mergePatch(current, body) as Json;
      else throw new ApiError(415, 'UnsupportedMediaType', `the double accepts JSON patch and JSON merge patch, not ${type || 'no content type'}`);
      const nextMeta = (next.metadata ?? {}) as Json;
      if (nextMeta.name !== current.metadata.name || nextMeta.namespace !== current.metadata.namespace) throw new ApiError(422, 'Invalid', 'metadata.name and metadata.namespace cannot change');
      if (JSON.stringify((next.spec as Json | undefined)?.selector) !== JSON.stringify(current.spec.selector)) {
        throw new ApiError(422, 'Invalid', `Deployment.apps "${name}" is invalid: spec.selector: Invalid value: field is immutable`);
      }
      const { status: _status, ...object } = next;
      validate({ ...object, metadata: { ...nextMeta } }, `Deployment.apps "${name}"`);
      const specChanged = JSON.stringify(next.spec) !== JSON.stringify(current.spec);
      const updated = { ...next, status: current.status, metadata: { ...nextMeta, resourceVersion: nextVersion(), generation: Number(current.metadata.generation) + (specChanged ? 1 : 0) } } as unknown as Json & { metadata: Json; spec: Json };
      store.set(keyOf('deployments', namespace, name!), updated);
      if (specChanged) rollOut(updated);
      return send(200, updated);
    }
    throw new ApiError(405, 'MethodNotAllowed', `the double does not ${verb} ${resource}`);
  }

  function podLog(res: ServerResponse, record: RecordedRequest, namespace: string, podName: string, query: URLSearchParams) {
    const pod = get('pods', namespace, podName) as { spec: { containers: Json[]; initContainers?: Json[] }; status: { initContainerStatuses: Json[]; containerStatuses: Json[] } };
    const names = [...(pod.spec.initContainers ?? []), ...pod.spec.containers].map((c) => String(c.name));
    let container = query.get('container');
    if (!container) {
      if (pod.spec.containers.length + (pod.spec.initContainers?.length ?? 0) > 1) {
        throw new ApiError(400, 'BadRequest', `a container name must be specified for pod ${podName}, choose one of: [${pod.spec.containers.map((c) => c.name).join(' ')}] or one of the init containers: [${(pod.spec.initContainers ?? []).map((c) => c.name).join(' ')}]`);
      }
      container = names[0]!;
    }
    if (!names.includes(container)) throw new ApiError(400, 'BadRequest', `container ${container} is not valid for pod ${podName}`);
    const stateOf = () => ([...pod.status.initContainerStatuses, ...pod.status.containerStatuses].find((s) => s.name === container)?.state ?? {}) as { running?: Json; terminated?: Json; waiting?: { reason?: string } };
    const initial = stateOf();
    if (!initial.running && !initial.terminated) throw new ApiError(400, 'BadRequest', `container "${container}" in pod "${podName}" is waiting to start: ${initial.waiting?.reason ?? 'ContainerCreating'}`);
    let text = logs.get(`${namespace}/${podName}/${container}`) ?? '';
    const tail = Number(query.get('tailLines'));
    if (query.has('tailLines') && Number.isInteger(tail) && tail >= 0) text = text.split(/(?<=\n)/).slice(-tail).join('');
    let bytes = Buffer.from(text);
    const limit = Number(query.get('limitBytes'));
    if (query.has('limitBytes')) {
      if (!Number.isInteger(limit) || limit < 1) throw new ApiError(422, 'Invalid', 'limitBytes: must be greater than 0');
      bytes = bytes.subarray(0, limit);
    }
    record.status = 200;
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.write(bytes);
    if (query.get('follow') !== 'true' || stateOf().terminated) return void res.end();
    // Followed: the stream stays open until the container ends (or its pod is gone).
    const check = () => {
      if (stateOf().terminated || !store.has(keyOf('pods', namespace, podName))) {
        waiters.delete(check);
        res.end();
      }
    };
    waiters.add(check);
    res.once('close', () => waiters.delete(check));
  }

  const server: Server = createServer({ key: tls.key, cert: tls.cert }, (req, res) => {
    const record: RecordedRequest = { method: req.method ?? '', path: req.url ?? '', verb: '', resource: '', namespace: '', name: undefined, status: 0, contentType: undefined, body: undefined };
    requests.push(record);
    handle(req, res, record).catch((error: unknown) => {
      const e = error instanceof ApiError ? error : new ApiError(500, 'InternalError', (error as Error).message);
      record.status = e.code;
      if (!res.headersSent) res.writeHead(e.code, { 'content-type': 'application/json' }).end(JSON.stringify(status(e.code, e.reason, e.message)));
      else res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;

  return {
    url: `https://127.0.0.1:${port}`,
    caFile: tls.certFile,
    tokenFile,
    requests,
    rules: options.rules,
    published,
    object: (resource, namespace, name) => store.get(keyOf(resource, namespace, name)),
    list: (resource, namespace) => [...store.entries()].filter(([key]) => key.startsWith(`${resource}/${namespace}/`)).map(([, o]) => o),
    close: async () => {
      for (const timer of timers) clearTimeout(timer);
      for (const w of [...waiters]) w();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function containersOf(object: Json): Json[] {
  return (((object.spec as Json | undefined)?.template as Json | undefined)?.spec as { containers?: Json[] } | undefined)?.containers ?? [];
}

/** Equality-based selectors (`a=b,c==d`), what the driver sends; anything else is refused, not guessed. */
function parseSelector(selector: string): Record<string, string> {
  const out: Record<string, string> = {};
  if (!selector) return out;
  for (const part of selector.split(',')) {
    const m = /^([a-z0-9A-Z./_-]+)==?([a-zA-Z0-9._-]*)$/.exec(part.trim());
    if (!m) throw new ApiError(400, 'BadRequest', `unable to parse requirement: ${part}`);
    out[m[1]!] = m[2]!;
  }
  return out;
}

const unescape = (token: string) => token.replaceAll('~1', '/').replaceAll('~0', '~');

/** RFC 6902 (add, remove, replace, test), on a copy; a failing test or a missing path is a 422, as on the API server. */
function applyJsonPatch(target: Json, ops: unknown): Json {
  if (!Array.isArray(ops)) throw new ApiError(400, 'BadRequest', 'a JSON patch is an array of operations');
  const doc = structuredClone(target);
  for (const op of ops as { op: string; path: string; value?: unknown }[]) {
    if (typeof op?.path !== 'string' || !op.path.startsWith('/')) throw new ApiError(422, 'Invalid', `invalid JSON patch path ${JSON.stringify(op?.path)}`);
    const tokens = op.path.slice(1).split('/').map(unescape);
    const last = tokens.pop()!;
    let parent: unknown = doc;
    for (const t of tokens) {
      parent = parent !== null && typeof parent === 'object' ? (parent as Record<string, unknown>)[t] : undefined;
      if (parent === undefined) throw new ApiError(422, 'Invalid', `the server rejected our request due to an error in our request: path ${op.path}: missing value`);
    }
    const container = parent as Record<string, unknown> & unknown[];
    const exists = Array.isArray(container) ? Number(last) < container.length : Object.hasOwn(container, last);
    switch (op.op) {
      case 'test':
        if (!exists || JSON.stringify(container[last as never]) !== JSON.stringify(op.value)) {
          throw new ApiError(422, 'Invalid', `the server rejected our request due to an error in our request: testing value ${op.path} failed: test failed`);
        }
        break;
      case 'replace':
        if (!exists) throw new ApiError(422, 'Invalid', `the server rejected our request due to an error in our request: replace operation does not apply: doc is missing key: ${op.path}`);
        container[last as never] = structuredClone(op.value) as never;
        break;
      case 'add':
        if (Array.isArray(container)) container.splice(last === '-' ? container.length : Number(last), 0, structuredClone(op.value));
        else container[last as never] = structuredClone(op.value) as never;
        break;
      case 'remove':
        if (!exists) throw new ApiError(422, 'Invalid', `the server rejected our request due to an error in our request: remove operation does not apply: doc is missing path: ${op.path}`);
        if (Array.isArray(container)) container.splice(Number(last), 1);
        else delete container[last as never];
        break;
      default:
        throw new ApiError(422, 'Invalid', `the double does not implement JSON patch operation ${String(op.op)}`);
    }
  }
  return doc;
}

/** RFC 7386. */
function mergePatch(target: unknown, patch: unknown): unknown {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> = target !== null && typeof target === 'object' && !Array.isArray(target) ? { ...(target as Json) } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}
