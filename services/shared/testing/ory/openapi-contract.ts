import { readFileSync } from 'node:fs';
import type { ValidateFunction } from 'ajv';
import { createAjv } from '../../ajv.js';

/**
 * A small OpenAPI 3.0.3 checker for the vendored Ory specs: finds the operation of a request and checks
 * its path, method, query, headers and body, then checks the response status, content type and body.
 * The doubles run every exchange through it, so a request the real service would refuse (unknown path,
 * wrong method, missing or mistyped parameter, body off the schema) fails the test that sent it, and a
 * double cannot answer anything the real service would not.
 */

type Json = Record<string, unknown>;

interface Parameter {
  name: string;
  in: 'query' | 'path' | 'header' | 'cookie';
  required?: boolean;
  schema?: Json;
}

interface Operation {
  operationId: string;
  parameters?: Parameter[];
  requestBody?: { required?: boolean; content?: Record<string, { schema?: Json }> };
  responses: Record<string, { $ref?: string; content?: Record<string, { schema?: Json }> }>;
}

export interface MatchedOperation {
  operationId: string;
  template: string;
  method: string;
  pathParams: Record<string, string>;
  operation: Operation;
}

export interface RequestToCheck {
  method: string;
  pathname: string;
  query: URLSearchParams;
  headers: Record<string, string | string[] | undefined>;
  contentType?: string;
  /** The parsed body (JSON value or form fields), undefined when the request had none. */
  body?: unknown;
}

const METHODS = ['get', 'put', 'post', 'patch', 'delete'];

/**
 * OpenAPI 3.0 schemas are almost JSON Schema; the one difference these specs hit is `nullable` on a
 * schema without `type` (any value, null included, already passes there), which Ajv refuses.
 */
function toJsonSchema(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(toJsonSchema);
  if (node === null || typeof node !== 'object') return node;
  const out: Json = {};
  for (const [key, value] of Object.entries(node)) out[key] = toJsonSchema(value);
  if ('nullable' in out && !('type' in out)) delete out.nullable;
  // OpenAPI's discriminator picks the one schema named by the tag; plain oneOf would also reject bodies
  // that happen to fit two variants (a password login body fits identifier_first too).
  const discriminator = out.discriminator as { propertyName?: string; mapping?: Record<string, string> } | undefined;
  if (discriminator?.propertyName && discriminator.mapping && Array.isArray(out.oneOf)) {
    const tag = discriminator.propertyName;
    const { oneOf: _oneOf, discriminator: _d, ...rest } = out;
    return {
      ...rest,
      type: 'object',
      required: [tag],
      properties: { [tag]: { enum: Object.keys(discriminator.mapping) } },
      allOf: Object.entries(discriminator.mapping).map(([value, ref]) => ({ if: { properties: { [tag]: { const: value } } }, then: { $ref: ref } })),
    };
  }
  return out;
}

function escapePointer(segment: string): string {
  return segment.replace(/~/g, '~0').replace(/\//g, '~1');
}

export class OpenApiContract {
  private readonly spec: Json;
  private readonly ajv = createAjv({ coerceTypes: false });
  private readonly compiled = new Map<string, ValidateFunction>();
  private readonly routes: Array<{ template: string; pattern: RegExp; names: string[] }>;

  constructor(
    specPath: string,
    private readonly id: string,
  ) {
    this.spec = JSON.parse(readFileSync(specPath, 'utf8')) as Json;
    // Formats Ory's Go generator uses beyond the standard ones.
    this.ajv.addFormat('uuid4', /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i);
    this.ajv.addSchema({ ...(toJsonSchema(this.spec) as Json), $id: id });
    this.routes = Object.keys(this.spec.paths as Json)
      .map((template) => {
        const names: string[] = [];
        const pattern = new RegExp(
          `^${template.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{([^}]+)\}/g, (_m, name: string) => {
            names.push(name);
            return '([^/]+)';
          })}$`,
        );
        return { template, pattern, names };
      })
      // Literal paths before templated ones: /admin/identities/by/external/{x} vs /admin/identities/{id}.
      .sort((a, b) => a.names.length - b.names.length);
  }

  /** Validate a value against the schema at a JSON pointer inside the spec (compiled once). */
  private validatorAt(pointer: string): ValidateFunction {
    let validate = this.compiled.get(pointer);
    if (!validate) {
      validate = this.ajv.compile({ $ref: `${this.id}#${pointer}` });
      this.compiled.set(pointer, validate);
    }
    return validate;
  }

  private check(pointer: string, value: unknown, what: string): string[] {
    const validate = this.validatorAt(pointer);
    if (validate(value)) return [];
    return (validate.errors ?? []).map((e) => `${what}${e.instancePath} ${e.message ?? e.keyword} ${e.keyword === 'required' || e.keyword === 'additionalProperties' ? JSON.stringify(e.params) : ''}`.trim());
  }

  match(method: string, pathname: string): MatchedOperation | undefined {
    const lower = method.toLowerCase();
    for (const route of this.routes) {
      const found = route.pattern.exec(pathname);
      if (!found) continue;
      const operation = ((this.spec.paths as Json)[route.template] as Record<string, Operation>)[lower];
      if (!operation || !METHODS.includes(lower)) continue;
      const pathParams = Object.fromEntries(route.names.map((name, i) => [name, decodeURIComponent(found[i + 1] as string)]));
      return { operationId: operation.operationId, template: route.template, method: lower, pathParams, operation };
    }
    return undefined;
  }

  /** Whether any method is defined for the path (to tell 404 from 405). */
  hasPath(pathname: string): boolean {
    return this.routes.some((route) => route.pattern.test(pathname));
  }

  private coerce(raw: string[], schema: Json | undefined): unknown {
    const type = schema?.type;
    const one = (value: string, itemType: unknown): unknown => {
      if (itemType === 'integer' || itemType === 'number') return /^-?\d+(\.\d+)?$/.test(value) ? Number(value) : value;
      if (itemType === 'boolean') return value === 'true' ? true : value === 'false' ? false : value;
      return value;
    };
    if (type === 'array') return raw.map((value) => one(value, (schema?.items as Json | undefined)?.type));
    return one(raw[raw.length - 1] as string, type);
  }

  /** Every way the request differs from the operation's contract; empty means the real service would accept its shape. */
  checkRequest(matched: MatchedOperation, request: RequestToCheck): string[] {
    const problems: string[] = [];
    const base = `/paths/${escapePointer(matched.template)}/${matched.method}`;
    const params = matched.operation.parameters ?? [];
    const declaredQuery = new Set(params.filter((p) => p.in === 'query').map((p) => p.name));

    params.forEach((param, index) => {
      let raw: string[] | undefined;
      if (param.in === 'query') raw = request.query.has(param.name) ? request.query.getAll(param.name) : undefined;
      else if (param.in === 'path') raw = matched.pathParams[param.name] === undefined ? undefined : [matched.pathParams[param.name] as string];
      else if (param.in === 'header') {
        const value = request.headers[param.name.toLowerCase()];
        raw = value === undefined ? undefined : Array.isArray(value) ? value : [value];
      }
      if (raw === undefined) {
        if (param.required) problems.push(`${param.in} parameter ${param.name} is required`);
        return;
      }
      if (param.schema) problems.push(...this.check(`${base}/parameters/${index}/schema`, this.coerce(raw, param.schema), `${param.in} parameter ${param.name}`));
    });
    // Operations that declare their query parameters get no others: a typo in a parameter name is a bug.
    if (declaredQuery.size > 0) {
      for (const name of new Set(request.query.keys())) {
        if (!declaredQuery.has(name)) problems.push(`query parameter ${name} is not defined for ${matched.operationId}`);
      }
    }

    const requestBody = matched.operation.requestBody;
    if (request.body === undefined) {
      if (requestBody?.required) problems.push('a request body is required');
      return problems;
    }
    if (!requestBody?.content) {
      problems.push(`${matched.operationId} takes no request body`);
      return problems;
    }
    const mediaType = (request.contentType ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
    const content = requestBody.content[mediaType];
    if (!content) {
      problems.push(`content type ${mediaType || '(none)'} is not accepted, only ${Object.keys(requestBody.content).join(', ')}`);
      return problems;
    }
    if (content.schema) problems.push(...this.check(`${base}/requestBody/content/${escapePointer(mediaType)}/schema`, request.body, 'body'));
    return problems;
  }

  /** Every way a response differs from what the operation documents for its status. */
  checkResponse(matched: MatchedOperation, status: number, contentType: string | undefined, body: unknown): string[] {
    const responses = matched.operation.responses;
    const key = responses[String(status)] ? String(status) : responses.default ? 'default' : undefined;
    if (!key) return [`status ${status} is not documented for ${matched.operationId}`];
    let pointer = `/paths/${escapePointer(matched.template)}/${matched.method}/responses/${key}`;
    let response = responses[key] as NonNullable<Operation['responses'][string]>;
    if (response.$ref) {
      pointer = response.$ref.slice(1);
      response = ((this.spec.components as Json).responses as Json)[response.$ref.split('/').pop() as string] as typeof response;
    }
    if (!response.content) return body === undefined ? [] : [`status ${status} of ${matched.operationId} has no body`];
    const mediaType = (contentType ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
    if (!response.content[mediaType]) return [`status ${status} of ${matched.operationId} must be ${Object.keys(response.content).join(' or ')}, not ${mediaType || '(none)'}`];
    return this.check(`${pointer}/content/${escapePointer(mediaType)}/schema`, body, `response ${status}`);
  }
}
