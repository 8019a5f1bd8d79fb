import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { contractPath } from '../../../services/shared/contracts.js';
import { XMLValidator } from 'fast-xml-parser';
import { parse as parseYaml } from 'yaml';

/**
 * GeoServer's REST specification (the vendored Swagger 2.0 YAMLs) as a request checker, so a fake
 * GeoServer can refuse any request the real one would not understand.
 *
 * What is checked, per request
 *   - the path matches a documented path and the method is documented for it (operations whose only
 *     documented answer is 405 "Invalid" count as undocumented);
 *   - path parameters are present; every query parameter is declared by the operation, has the
 *     declared type (boolean, integer, enum), and required ones are present;
 *   - a documented body is present when required, with a content type the operation consumes;
 *   - JSON bodies are validated against the body schema leniently (see below); SLD bodies must be
 *     well-formed XML with a StyledLayerDescriptor root.
 *
 * Leniency, because the upstream files do not always match GeoServer's own JSON (vendor README):
 *   - the ACL paths and two style paths carry an extra "/rest" on top of basePath: it is dropped;
 *   - a body may be wrapped in its root element ({"dataStore": {...}}, {"wfs": {...}}) when the schema
 *     describes the inner object: the wrapper name must match the definition (xml name, title, or the
 *     definition name without "Info"), case-insensitively;
 *   - a schema `array` accepts XStream's wrapped list ({"entry": [...]}, {"org.geotools.util.Version":
 *     [...]}); a `string` item accepts XStream's one-member element object ({"version": "1.3.0"});
 *   - `boolean` accepts "true"/"false", numbers accept numeric strings (the examples use both);
 *   - ACL bodies (title "rules") are the flat map GeoServer really takes, {"<rule>": "<roles>"}, and
 *     each rule must have the documented form: layer <workspace>.<layer>.[r|w|a], service
 *     <service>.<operation>.
 *   Members the schema does not declare are refused (GeoServer's XStream rejects unknown elements).
 */

export const REST_BASE = '/geoserver/rest';
/** GeoServer's REST documentation among the pinned contracts (services/shared/contracts.ts). */
const restSpecDir = (): string => dirname(contractPath('geoserver-rest/workspaces.yaml'));

type Schema = {
  $ref?: string;
  type?: string;
  properties?: Record<string, Schema>;
  items?: Schema;
  required?: string[];
  enum?: unknown[];
  title?: string;
  xml?: { name?: string };
};

interface Parameter {
  name: string;
  in: 'path' | 'query' | 'body' | 'header';
  required?: boolean;
  type?: string;
  enum?: unknown[];
  schema?: Schema;
  $ref?: string;
}

interface Operation {
  operationId?: string;
  parameters?: Parameter[];
  consumes?: string[];
  responses?: Record<string, unknown>;
}

interface SpecFile {
  file: string;
  doc: { paths: Record<string, Record<string, Operation | Parameter[]>>; definitions?: Record<string, Schema>; parameters?: Record<string, Parameter> };
}

export interface MatchedOperation {
  file: string;
  template: string;
  method: string;
  operation: Operation;
  pathParams: Record<string, string>;
}

export interface CheckedRequest {
  method: string;
  /** Path below /geoserver/rest, without query string. */
  path: string;
  query: URLSearchParams;
  contentType: string | undefined;
  body: string;
}

export class SpecViolation extends Error {
  override readonly name = 'SpecViolation';
}

interface Route {
  file: SpecFile;
  template: string;
  pattern: RegExp;
  names: string[];
  methods: Record<string, Operation>;
  shared: Parameter[];
}

export class RestSpec {
  private readonly routes: Route[] = [];

  constructor(dir = restSpecDir()) {
    for (const file of readdirSync(dir).filter((f) => f.endsWith('.yaml')).sort()) {
      const doc = parseYaml(readFileSync(join(dir, file), 'utf8')) as SpecFile['doc'];
      const spec: SpecFile = { file, doc };
      for (const [rawTemplate, item] of Object.entries(doc.paths ?? {})) {
        const template = rawTemplate.replace(/^\/rest(?=\/)/, '');
        const names: string[] = [];
        const pattern = new RegExp(
          `^${template
            .split(/(\{[^}]+\})/)
            .map((part) => {
              const name = /^\{([^}]+)\}$/.exec(part)?.[1];
              if (!name) return part.replace(/[.*+?^$()|[\]\\]/g, '\\$&');
              names.push(name);
              return '([^/]+?)';
            })
            .join('')}$`,
        );
        const methods: Record<string, Operation> = {};
        for (const [method, operation] of Object.entries(item)) {
          if (method !== 'parameters' && isDocumented(operation as Operation)) methods[method.toUpperCase()] = operation as Operation;
        }
        this.routes.push({ file: spec, template, pattern, names, methods, shared: (item.parameters as Parameter[] | undefined) ?? [] });
      }
    }
  }

  /** Check one request; returns the matched operation or throws SpecViolation saying why. */
  check(request: CheckedRequest): MatchedOperation {
    const candidates = this.routes
      .map((route) => ({ route, match: route.pattern.exec(request.path) }))
      .filter((c): c is { route: Route; match: RegExpExecArray } => c.match !== null)
      // A literal path (/workspaces/x/styles) beats a template that happens to match it too.
      .sort((a, b) => a.route.names.length - b.route.names.length);
    if (candidates.length === 0) throw new SpecViolation(`${request.method} ${request.path}: no such path in the REST specification`);
    const withMethod = candidates.find((c) => c.route.methods[request.method]);
    if (!withMethod) throw new SpecViolation(`${request.method} ${request.path}: method not documented for ${candidates[0]?.route.template}`);
    const { route, match } = withMethod;
    const operation = route.methods[request.method] as Operation;
    const pathParams = Object.fromEntries(route.names.map((name, i) => [name, decodeURIComponent(match[i + 1] ?? '')]));
    const parameters = [...route.shared, ...(operation.parameters ?? [])].map((p) => this.resolveParameter(route.file, p));
    this.checkQuery(request, parameters);
    this.checkBody(route.file, request, operation, parameters);
    return { file: route.file.file, template: route.template, method: request.method, operation, pathParams };
  }

  private resolveParameter(file: SpecFile, parameter: Parameter): Parameter {
    if (!parameter.$ref) return parameter;
    const name = parameter.$ref.replace('#/parameters/', '');
    const resolved = file.doc.parameters?.[name];
    if (!resolved) throw new Error(`${file.file}: unresolvable parameter ${parameter.$ref}`);
    return resolved;
  }

  private checkQuery(request: CheckedRequest, parameters: Parameter[]): void {
    const declared = new Map(parameters.filter((p) => p.in === 'query').map((p) => [p.name, p]));
    for (const [name, value] of request.query) {
      const parameter = declared.get(name);
      if (!parameter) throw new SpecViolation(`${request.method} ${request.path}: undeclared query parameter ${name}`);
      if (parameter.type === 'boolean' && value !== 'true' && value !== 'false') throw new SpecViolation(`query ${name}=${value} is not a boolean`);
      if (parameter.type === 'integer' && !/^-?\d+$/.test(value)) throw new SpecViolation(`query ${name}=${value} is not an integer`);
      if (parameter.enum && !parameter.enum.includes(value)) throw new SpecViolation(`query ${name}=${value} is not one of ${parameter.enum.join(', ')}`);
    }
    for (const parameter of declared.values()) {
      if (parameter.required && !request.query.has(parameter.name)) throw new SpecViolation(`missing required query parameter ${parameter.name}`);
    }
  }

  private checkBody(file: SpecFile, request: CheckedRequest, operation: Operation, parameters: Parameter[]): void {
    const bodyParameter = parameters.find((p) => p.in === 'body');
    const where = `${request.method} ${request.path}`;
    if (!bodyParameter) {
      if (request.body.length > 0) throw new SpecViolation(`${where}: the operation takes no body`);
      return;
    }
    if (request.body.length === 0) {
      if (bodyParameter.required) throw new SpecViolation(`${where}: body required`);
      return;
    }
    const mediaType = (request.contentType ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
    if (operation.consumes && !operation.consumes.includes(mediaType)) {
      throw new SpecViolation(`${where}: content type ${mediaType || '(none)'} not consumed (accepts ${operation.consumes.join(', ')})`);
    }
    if (mediaType === 'application/json' || mediaType === 'text/json') {
      let json: unknown;
      try {
        json = JSON.parse(request.body);
      } catch {
        throw new SpecViolation(`${where}: body is not JSON`);
      }
      const schema = bodyParameter.schema ?? {};
      const defName = schema.$ref?.replace('#/definitions/', '');
      const resolved = this.resolveSchema(file, schema);
      if (resolved.title === 'rules') return checkAclRules(where, request.path, json);
      validate(this, file, unwrap(json, resolved, defName), resolved, where);
      return;
    }
    if (mediaType.endsWith('+xml') || mediaType === 'application/xml' || mediaType === 'text/xml') {
      const result = XMLValidator.validate(request.body);
      if (result !== true) throw new SpecViolation(`${where}: malformed XML (${result.err.msg})`);
      if (mediaType === 'application/vnd.ogc.sld+xml' && !/<(\w+:)?StyledLayerDescriptor[\s>]/.test(request.body)) {
        throw new SpecViolation(`${where}: an SLD body needs a StyledLayerDescriptor root`);
      }
    }
  }

  resolveSchema(file: SpecFile, schema: Schema): Schema {
    if (!schema.$ref) return schema;
    const name = schema.$ref.replace('#/definitions/', '');
    const resolved = file.doc.definitions?.[name];
    if (!resolved) throw new Error(`${file.file}: unresolvable schema ${schema.$ref}`);
    return resolved;
  }
}

function isDocumented(operation: Operation): boolean {
  const codes = Object.keys(operation.responses ?? {});
  return codes.length > 0 && !codes.every((code) => code === '405');
}

function unwrap(json: unknown, schema: Schema, defName: string | undefined): unknown {
  if (json === null || typeof json !== 'object' || Array.isArray(json)) return json;
  const keys = Object.keys(json);
  if (keys.length !== 1) return json;
  const key = keys[0] as string;
  if (schema.properties?.[key]) return json;
  const names = [schema.xml?.name, schema.title, defName, defName?.replace(/Info$/, '')].filter((n): n is string => !!n).map((n) => n.toLowerCase());
  return names.includes(key.toLowerCase()) ? (json as Record<string, unknown>)[key] : json;
}

function validate(spec: RestSpec, file: SpecFile, value: unknown, schemaIn: Schema, where: string, path = '$'): void {
  const schema = spec.resolveSchema(file, schemaIn);
  const fail = (message: string) => {
    throw new SpecViolation(`${where}: ${path} ${message}`);
  };
  switch (schema.type) {
    case 'string':
      if (typeof value !== 'string' && typeof value !== 'number') fail(`must be a string`);
      if (schema.enum && !schema.enum.includes(value)) fail(`must be one of ${schema.enum.join(', ')}`);
      return;
    case 'boolean':
      if (typeof value !== 'boolean' && value !== 'true' && value !== 'false') fail('must be a boolean');
      return;
    case 'integer':
    case 'number':
      if (typeof value !== 'number' && !(typeof value === 'string' && /^-?\d+(\.\d+)?$/.test(value))) fail(`must be a ${schema.type}`);
      return;
    case 'array': {
      let items: unknown = value;
      if (!Array.isArray(value)) {
        // XStream wraps lists: {"entry": [...]} or {"string": [...]}; a single element may be bare.
        if (value === null || typeof value !== 'object' || Object.keys(value).length !== 1) fail('must be an array (or a wrapped list)');
        const inner = Object.values(value as Record<string, unknown>)[0];
        items = Array.isArray(inner) ? inner : [inner];
      }
      (items as unknown[]).forEach((item, i) => validateItem(spec, file, item, schema.items ?? {}, where, `${path}[${i}]`));
      return;
    }
    default: {
      if (schema.type !== 'object' && !schema.properties) return;
      if (value === null || typeof value !== 'object' || Array.isArray(value)) fail('must be an object');
      const record = value as Record<string, unknown>;
      for (const required of schema.required ?? []) if (record[required] === undefined) fail(`misses required member ${required}`);
      if (!schema.properties) return;
      for (const [key, member] of Object.entries(record)) {
        const memberSchema = schema.properties[key];
        if (!memberSchema) fail(`has a member the schema does not declare: ${key}`);
        validate(spec, file, member, memberSchema as Schema, where, `${path}.${key}`);
      }
    }
  }
}

function validateItem(spec: RestSpec, file: SpecFile, item: unknown, schema: Schema, where: string, path: string): void {
  const resolved = spec.resolveSchema(file, schema);
  // XStream writes a string list element as a one-member object, e.g. {"version": "1.3.0"}.
  if (resolved.type === 'string' && item !== null && typeof item === 'object' && !Array.isArray(item)) {
    const values = Object.values(item);
    if (values.length === 1 && typeof values[0] === 'string') return;
  }
  // Connection parameters and metadata entries come as {"@key": k, "$": v} (XStream), not {key, value}.
  if (resolved.properties?.key && resolved.properties.value && item !== null && typeof item === 'object' && '@key' in item) {
    const entry = item as Record<string, unknown>;
    if (typeof entry['@key'] !== 'string' || typeof entry.$ !== 'string' || Object.keys(entry).length !== 2) {
      throw new SpecViolation(`${where}: ${path} must be {"@key": string, "$": string}`);
    }
    return;
  }
  validate(spec, file, item, resolved, where, path);
}

const LAYER_RULE = /^[^.\s]+\.[^.\s]+\.[rwa]$/;
const SERVICE_RULE = /^[^.\s]+\.[^.\s]+$/;
const ROLE_LIST = /^(\*|[A-Za-z0-9_-]+(,\s*[A-Za-z0-9_-]+)*)$/;

function checkAclRules(where: string, path: string, json: unknown): void {
  if (json === null || typeof json !== 'object' || Array.isArray(json)) throw new SpecViolation(`${where}: ACL body must be an object of rule → roles`);
  const entries = Object.entries(json as Record<string, unknown>);
  if (entries.length === 0) throw new SpecViolation(`${where}: ACL body has no rules`);
  const format = path.startsWith('/security/acl/layers') ? LAYER_RULE : path.startsWith('/security/acl/services') ? SERVICE_RULE : /.+/;
  for (const [rule, roles] of entries) {
    if (!format.test(rule)) throw new SpecViolation(`${where}: rule ${rule} does not have the documented form`);
    if (typeof roles !== 'string' || !ROLE_LIST.test(roles)) throw new SpecViolation(`${where}: roles of ${rule} must be a comma-separated role list or *`);
  }
}
