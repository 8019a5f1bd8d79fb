import { BarmanObjectStoreConfiguration } from '@kubernetes-models/cloudnative-pg/github.com/cloudnative-pg/barman-cloud/pkg/api/BarmanObjectStoreConfiguration';
import { ObjectMeta } from '@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta';
import { declaredFields, type Declaration } from './declared-fields.js';

/**
 * Objects checked against the schemas of the models on the npm registry, pinned by package-lock.json
 * (exact versions in package.json's devDependencies), so a clean clone has them after `npm ci`:
 *
 *   kubernetes-models 5.1.0                 Kubernetes 1.36.0's OpenAPI definitions, merged with older
 *                                           releases' (so it also knows API versions removed since: the
 *                                           test keeps to stable ones)
 *   @kubernetes-models/cloudnative-pg 2.0.0 CloudNativePG 1.29.0's api/v1 (Cluster, Pooler,
 *                                           ScheduledBackup), and barman-cloud 0.5.0's object-store
 *                                           configuration
 *   @kubernetes-models/cert-manager 6.0.0   cert-manager 1.20.2 (ClusterIssuer)
 *   @kubernetes-models/apimachinery 3.0.2   ObjectMeta, for the one kind without a model
 *
 * Each object passes two checks, both from its model: the model's validator (types, required fields,
 * enums, patterns, formats: what the API server's schema validation refuses) and its declaration
 * (unknown fields, which the validators let through: declared-fields.ts). The Barman Cloud plugin's
 * ObjectStore has no model on the registry; see objectStoreProblems.
 */

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => v !== null && typeof v === 'object' && !Array.isArray(v);

/** A model class: its constructor takes the object, `validate()` throws Ajv's ValidationError. */
type ModelClass = new (data: unknown) => { validate(): void };

interface AjvError {
  instancePath: string;
  keyword: string;
  message?: string;
  params: Record<string, unknown>;
}

/** Where a group's models live; every group not listed is Kubernetes' own (kubernetes-models). */
const MODEL_PACKAGES: Record<string, string> = {
  'postgresql.cnpg.io': '@kubernetes-models/cloudnative-pg',
  'cert-manager.io': '@kubernetes-models/cert-manager',
};

/** The module and interface of a kind's model, e.g. kubernetes-models/apps/v1/Deployment, IDeployment. */
export function modelDeclaration(apiVersion: string, kind: string): Declaration {
  const group = apiVersion.includes('/') ? apiVersion.slice(0, apiVersion.indexOf('/')) : '';
  return { module: `${MODEL_PACKAGES[group] ?? 'kubernetes-models'}/${apiVersion}/${kind}`, name: `I${kind}` };
}

const OBJECT_STORE = 'barmancloud.cnpg.io/v1 ObjectStore';
const OBJECT_META: Declaration = { module: '@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta', name: 'IObjectMeta' };
const BARMAN_CONFIGURATION: Declaration = {
  module: '@kubernetes-models/cloudnative-pg/github.com/cloudnative-pg/barman-cloud/pkg/api/BarmanObjectStoreConfiguration',
  name: 'IBarmanObjectStoreConfiguration',
};

/** Errors listed per object, enough to read what went wrong. */
const MAX_ERRORS = 20;

const describe = (e: AjvError, path: string) =>
  `${path}${e.instancePath || (path ? '' : '/')} ${e.message ?? e.keyword}${['enum', 'pattern', 'format'].includes(e.keyword) ? ` ${JSON.stringify(e.params)}` : ''}`;

export interface Problem {
  object: string;
  errors: string[];
}

export interface Validators {
  /** The problems of one object, or undefined when it is valid; a kind without a model is a problem too. */
  validate(object: Json, label: string): Problem | undefined;
  /** What checks a kind ("apiVersion kind"): its model's module, or undefined when none was found. */
  checkedBy(key: string): string | undefined;
}

/**
 * The validators for the given kinds ("apiVersion kind", e.g. "apps/v1 Deployment"): each kind's model
 * is imported and its declaration parsed once, up front.
 */
export async function loadValidators(keys: Iterable<string>): Promise<Validators> {
  const models = new Map<string, { model: ModelClass; declaration: Declaration }>();
  for (const key of new Set(keys)) {
    if (key === OBJECT_STORE) continue;
    const [apiVersion = '', kind = ''] = key.split(' ');
    const declaration = modelDeclaration(apiVersion, kind);
    const model = await import(declaration.module).then(
      (m: Record<string, unknown>) => m[kind] as ModelClass | undefined,
      () => undefined,
    );
    if (model) models.set(key, { model, declaration });
  }
  const undeclaredFields = declaredFields([...[...models.values()].map((m) => m.declaration), OBJECT_META, BARMAN_CONFIGURATION]);

  /** Both checks of one value against one model: the validator's errors and the undeclared fields. */
  function againstModel(value: unknown, model: ModelClass, declaration: Declaration, path = ''): string[] {
    const errors: string[] = [];
    try {
      new model(value).validate();
    } catch (error) {
      const found = (error as { errors?: AjvError[] }).errors;
      if (!found) throw error;
      errors.push(...found.map((e) => describe(e, path)));
    }
    errors.push(...undeclaredFields(value, declaration, path));
    return errors;
  }

  /**
   * The Barman Cloud plugin's ObjectStore (barmancloud.cnpg.io/v1): no package on the registry has its
   * model, so its shape is checked here, after the plugin's CRD (v0.14.0, api/v1 ObjectStoreSpec). The
   * heart of it, `spec.configuration`, is barman-cloud's BarmanObjectStoreConfiguration, whose model
   * @kubernetes-models/cloudnative-pg ships (CloudNativePG's in-tree backup used the same type);
   * metadata is ObjectMeta. `instanceSidecarConfiguration` is left out on purpose: the program does not
   * set it, and nothing here would check it, so setting it fails until this check learns its shape.
   */
  function objectStoreProblems(object: Json): string[] {
    const errors = unknownKeys(object, ['apiVersion', 'kind', 'metadata', 'spec'], '');
    if (!isObject(object.metadata)) errors.push('/metadata must be an object (required)');
    else errors.push(...againstModel(object.metadata, ObjectMeta as ModelClass, OBJECT_META, '/metadata'));
    const spec = object.spec;
    if (!isObject(spec)) return [...errors, '/spec must be an object (required)'];
    errors.push(...unknownKeys(spec, ['configuration', 'retentionPolicy'], '/spec'));
    if (!isObject(spec.configuration)) errors.push('/spec/configuration must be an object (required)');
    else {
      errors.push(...againstModel(spec.configuration, BarmanObjectStoreConfiguration as ModelClass, BARMAN_CONFIGURATION, '/spec/configuration'));
      // The CRD's CEL rule: the server name is a parameter of the Cluster's plugin entry, not of the store.
      if ('serverName' in spec.configuration) errors.push("/spec/configuration/serverName is forbidden: use the 'serverName' plugin parameter in the Cluster");
    }
    const retention = spec.retentionPolicy;
    if (retention !== undefined && (typeof retention !== 'string' || !/^[1-9][0-9]*[dwm]$/.test(retention))) {
      errors.push(`/spec/retentionPolicy must be a count of days, weeks or months such as 30d (pattern ^[1-9][0-9]*[dwm]$), is ${JSON.stringify(retention)}`);
    }
    return errors;
  }

  return {
    validate(object, label) {
      const key = `${String(object.apiVersion)} ${String(object.kind)}`;
      const found = models.get(key);
      let errors: string[];
      if (key === OBJECT_STORE) errors = objectStoreProblems(object);
      else if (found) errors = againstModel(object, found.model, found.declaration);
      else errors = [`no model for ${key} (looked for ${modelDeclaration(String(object.apiVersion), String(object.kind)).module})`];
      return errors.length ? { object: label, errors: errors.slice(0, MAX_ERRORS) } : undefined;
    },
    checkedBy(key) {
      if (key === OBJECT_STORE) return `the ObjectStore check (configuration: ${BARMAN_CONFIGURATION.module})`;
      return models.get(key)?.declaration.module;
    },
  };
}

function unknownKeys(value: Json, allowed: string[], path: string): string[] {
  return Object.keys(value)
    .filter((k) => !allowed.includes(k))
    .map((k) => `${path}/${k} is not a field of the ObjectStore (known: ${allowed.join(', ')})`);
}
