import { Ajv, type Options } from 'ajv';
import addFormatsModule from 'ajv-formats';

// ajv-formats is CommonJS; under NodeNext its default export arrives wrapped once more.
type AddFormats = (ajv: Ajv) => Ajv;
const addFormats = ((addFormatsModule as unknown as { default?: AddFormats }).default ??
  (addFormatsModule as unknown as AddFormats));

/**
 * An Ajv 8 instance as the vendored Ory README prescribes: non-strict, every error, standard formats.
 * Shared by the identity config check and the Ory doubles' OpenAPI contracts (services/shared/testing/ory).
 */
export function createAjv(options: Options = {}): Ajv {
  const ajv = new Ajv({ strict: false, allErrors: true, ...options });
  addFormats(ajv);
  return ajv;
}
