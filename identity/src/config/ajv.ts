import type { ErrorObject } from 'ajv';

/** `/secrets/cipher/0` → `secrets.cipher[0]`, the spelling operators see in the YAML file. */
export function pointerToKey(pointer: string): string {
  if (pointer === '') return '(root)';
  return pointer
    .slice(1)
    .split('/')
    .map((part) => part.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((key, part) => (/^\d+$/.test(part) ? `${key}[${part}]` : key ? `${key}.${part}` : part), '');
}

/** One readable line per schema error, naming the key (a missing property names the property itself). */
export function describeAjvError(error: ErrorObject): { key: string; message: string } {
  let pointer = error.instancePath;
  if (error.keyword === 'required') pointer += `/${String((error.params as { missingProperty: string }).missingProperty)}`;
  if (error.keyword === 'additionalProperties') {
    pointer += `/${String((error.params as { additionalProperty: string }).additionalProperty)}`;
    return { key: pointerToKey(pointer), message: 'is not a known key' };
  }
  return { key: pointerToKey(pointer), message: error.message ?? error.keyword };
}
