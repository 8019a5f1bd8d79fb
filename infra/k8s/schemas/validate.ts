import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { PINNED_SCHEMAS, type SchemaName } from './pins.js';

/**
 * Objects checked as the API server would check them with strict field validation (`kubectl apply
 * --validate=strict`, server-side apply's default): against the pinned Kubernetes OpenAPI definitions
 * and the pinned CRD schemas, with an unknown field an error (an object schema without
 * `additionalProperties` and without `x-kubernetes-preserve-unknown-fields` is closed, as the server's
 * pruning would drop or refuse the field). The types the OpenAPI spells as formats are given their
 * meaning: int-or-string is an integer or a string.
 */

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => v !== null && typeof v === 'object' && !Array.isArray(v);

/** Close every object schema that lists properties, and turn int-or-string into what it means. */
function strict(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(strict);
  if (!isObject(schema)) return schema;
  const out: Json = Object.fromEntries(Object.entries(schema).map(([k, v]) => [k, k === 'properties' && isObject(v) ? Object.fromEntries(Object.entries(v).map(([p, s]) => [p, strict(s)])) : strict(v)]));
  if (out['x-kubernetes-int-or-string'] === true || out.format === 'int-or-string') {
    delete out.type;
    delete out.format;
    out.anyOf = [{ type: 'integer' }, { type: 'string' }];
  }
  if (isObject(out.properties) && out.additionalProperties === undefined && out['x-kubernetes-preserve-unknown-fields'] !== true) out.additionalProperties = false;
  return out;
}

function newAjv(): Ajv {
  const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: true });
  addFormats.default(ajv);
  for (const format of ['int32', 'int64', 'double', 'float', 'byte', 'int-or-string']) ajv.addFormat(format, true);
  return ajv;
}

export interface Problem {
  object: string;
  errors: string[];
}

const describeErrors = (errors: ErrorObject[] | null | undefined) =>
  (errors ?? []).slice(0, 20).map((e) => `${e.instancePath || '/'} ${e.message ?? ''}${e.keyword === 'additionalProperties' ? ` (${String((e.params as { additionalProperty?: string }).additionalProperty)})` : ''}`);

/** The validators of the pinned schemas found in `dir` (infra/k8s/schemas/pins.ts locateSchemas). */
export function loadValidators(dir: string) {
  const read = (name: SchemaName) => readFileSync(join(dir, PINNED_SCHEMAS[name].file), 'utf8');

  // Kubernetes: one schema holding every definition; each kind's validator compiles its closure on first use.
  const swagger = JSON.parse(read('kubernetes')) as { definitions: Record<string, Json> };
  const k8sAjv = newAjv();
  k8sAjv.addSchema({ $id: 'k8s', definitions: Object.fromEntries(Object.entries(swagger.definitions).map(([name, s]) => [name, strict(s)])) });
  const byKind = new Map<string, string>();
  for (const [name, definition] of Object.entries(swagger.definitions)) {
    for (const gvk of (definition['x-kubernetes-group-version-kind'] as { group: string; version: string; kind: string }[] | undefined) ?? []) {
      byKind.set(`${gvk.group ? `${gvk.group}/` : ''}${gvk.version} ${gvk.kind}`, name);
    }
  }

  // The CRDs: each served version's openAPIV3Schema.
  const crdAjv = newAjv();
  const crds = new Map<string, ValidateFunction>();
  for (const name of ['cnpgClusters', 'cnpgPoolers', 'cnpgScheduledBackups', 'barmanObjectStores', 'certManagerClusterIssuers'] as const) {
    const crd = parseYaml(read(name)) as { spec: { group: string; names: { kind: string }; versions: { name: string; served: boolean; schema: { openAPIV3Schema: Json } }[] } };
    for (const version of crd.spec.versions.filter((v) => v.served)) {
      crds.set(`${crd.spec.group}/${version.name} ${crd.spec.names.kind}`, crdAjv.compile(strict(version.schema.openAPIV3Schema) as Json));
    }
  }
  const objectMeta = () => k8sAjv.getSchema('k8s#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta');

  /** The problems of one object, or undefined when it is valid; an unknown apiVersion and kind is a problem too. */
  function validate(object: Json, label: string): Problem | undefined {
    const key = `${String(object.apiVersion)} ${String(object.kind)}`;
    const definition = byKind.get(key);
    const errors: string[] = [];
    if (definition) {
      const check = k8sAjv.getSchema(`k8s#/definitions/${definition}`);
      if (!check) throw new Error(`no schema for ${definition}`);
      if (!check(object)) errors.push(...describeErrors(check.errors));
    } else {
      const check = crds.get(key);
      if (!check) return { object: label, errors: [`no pinned schema for ${key}`] };
      if (!check(object)) errors.push(...describeErrors(check.errors));
      // A CRD schema says only `metadata: object`; the API server checks it as ObjectMeta.
      const meta = objectMeta();
      if (meta && !meta(object.metadata)) errors.push(...describeErrors(meta.errors).map((e) => `metadata${e}`));
    }
    return errors.length ? { object: label, errors } : undefined;
  }

  /** Default values of a chart (the key tree a release's values must stay within). */
  const chartDefaults = (name: 'kratosValues' | 'hydraValues') => parseYaml(read(name)) as Json;

  return { validate, chartDefaults, kinds: () => [...byKind.keys(), ...crds.keys()] };
}

/**
 * A Helm release's values against its chart's defaults: every key we set must be one the chart knows
 * (a typo like `deployment.resource` is silently ignored by Helm). Below a key whose default is an empty
 * map or list, or below a `freeForm` path (the Ory configuration itself), anything goes.
 */
export function unknownChartKeys(values: unknown, defaults: unknown, freeForm: string[], path = ''): string[] {
  if (!isObject(values)) return [];
  if (!isObject(defaults)) return [];
  return Object.entries(values).flatMap(([key, value]) => {
    const at = path ? `${path}.${key}` : key;
    if (freeForm.includes(at)) return [];
    if (!(key in defaults)) return [at];
    const fallback = defaults[key];
    if (isObject(fallback) && Object.keys(fallback).length > 0) return unknownChartKeys(value, fallback, freeForm, at);
    return [];
  });
}
