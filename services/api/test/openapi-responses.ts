import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';

/**
 * Every response the API test suite receives is checked against the API's own OpenAPI document (as
 * served at /api/openapi.json): the status must be documented for the operation, the media type too,
 * and the body must validate against the documented schema. The test helpers run each exchange through
 * it, so a response the document does not describe (an undocumented member, status or media type)
 * fails the test that received it. Paths or methods the document does not describe at all (the docs
 * page, a 404 for an unknown route, a 405) are not checked.
 */

type Json = Record<string, unknown>;
type AddFormats = (ajv: Ajv2020) => Ajv2020;
// ajv-formats is CommonJS; under NodeNext its default export arrives wrapped once more.
const addFormats = (addFormatsModule as unknown as { default?: AddFormats }).default ?? (addFormatsModule as unknown as AddFormats);

interface ResponseObject {
  content?: Record<string, { schema?: unknown }>;
}

export interface CheckedResponse {
  method: string;
  /** Path with query, as requested. */
  path: string;
  status: number;
  contentType: string | null;
  text: string;
}

export interface ResponseChecker {
  /** A description of what does not match the document, or undefined when the response matches. */
  check(response: CheckedResponse): string | undefined;
}

const pointerEscape = (segment: string) => segment.replace(/~/g, '~0').replace(/\//g, '~1');

export function createResponseChecker(document: Json): ResponseChecker {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  // The whole document as one schema resource, so its $refs (#/components/schemas/…) resolve.
  ajv.addSchema({ ...document, $id: 'openapi.json' });
  const paths = (document.paths ?? {}) as Record<string, Record<string, { responses?: Record<string, ResponseObject> }>>;
  // Literal paths before templated ones: /api/qc/queue wins over /api/qc/{id}.
  const templates = Object.keys(paths)
    .map((template) => ({ template, params: (template.match(/\{/g) ?? []).length, pattern: new RegExp(`^${template.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\?\{[^}]+\\?\}/g, '[^/]+')}$`) }))
    .sort((a, b) => a.params - b.params);
  const compiled = new Map<string, ValidateFunction>();

  return {
    check({ method, path, status, contentType, text }) {
      const pathname = path.split('?')[0]!;
      const matched = templates.find((t) => t.pattern.test(pathname));
      const verb = method.toLowerCase() === 'head' ? 'get' : method.toLowerCase();
      const operation = matched ? paths[matched.template]![verb] : undefined;
      if (!matched || !operation) return undefined;
      const where = `${method} ${matched.template} → ${status}`;
      const responses = operation.responses ?? {};
      const key = [String(status), `${String(status)[0]}XX`, 'default'].find((k) => responses[k] !== undefined);
      if (!key) return `${where}: status ${status} is not documented (documented: ${Object.keys(responses).join(', ')})`;
      const documented = responses[key]!;
      if (method.toUpperCase() === 'HEAD' || !documented.content) return undefined;
      if (text.length === 0) return `${where}: the document describes a body, the response has none`;
      const mediaType = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
      const content = documented.content[mediaType];
      if (!content) return `${where}: media type ${mediaType || '(none)'} is not documented (documented: ${Object.keys(documented.content).join(', ')})`;
      if (content.schema === undefined) return undefined;
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        return `${where}: the body is not JSON`;
      }
      const ref = `openapi.json#/paths/${pointerEscape(matched.template)}/${verb}/responses/${key}/content/${pointerEscape(mediaType)}/schema`;
      let validate = compiled.get(ref);
      if (!validate) {
        validate = ajv.compile({ $ref: ref });
        compiled.set(ref, validate);
      }
      if (validate(body)) return undefined;
      const errors = (validate.errors ?? []).slice(0, 5).map((e) => `${e.instancePath || '(root)'} ${e.message ?? ''} ${e.params ? JSON.stringify(e.params) : ''}`);
      return `${where}: the body does not match the documented schema: ${errors.join('; ')}`;
    },
  };
}

/** The checker for an API under test, from the document that API serves. */
export async function fetchResponseChecker(baseUrl: string): Promise<ResponseChecker> {
  const response = await fetch(`${baseUrl}/api/openapi.json`);
  if (!response.ok) throw new Error(`GET /api/openapi.json answered ${response.status}`);
  return createResponseChecker((await response.json()) as Json);
}

/** Throws when a response does not match the document: the test that received it fails with the reason. */
export function assertDocumented(checker: ResponseChecker, response: CheckedResponse): void {
  const problem = checker.check(response);
  if (problem) throw new Error(`response not described by /api/openapi.json: ${problem}\n${response.text.slice(0, 500)}`);
}
