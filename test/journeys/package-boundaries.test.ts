import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';
import { beforeAll, describe, expect, it } from 'vitest';

/**
 * The package boundaries of eslint.config.js, proved on probe imports: packages meet only through
 * services/shared, services/shared imports no package, runtime code imports no test, and every
 * relative import resolves (so none slips past the zones unresolved). The probes are linted as the
 * files they pretend to be (`lintText` with their path; nothing is written), through the project's
 * own configuration. Import circles are refused too (import-x/no-cycle; it passes over type-only
 * imports, which leave nothing at run time). `.mjs` probes: the zones are checked on the resolved
 * file, whatever the language of the importing file (`npm run lint` checks the .ts, .mjs and .astro files of the tree the same way).
 */
const root = join(dirname(fileURLToPath(import.meta.url)), '../..');
let eslint: ESLint;

beforeAll(() => {
  eslint = new ESLint({ cwd: root });
});

async function boundaryFindings(path: string, source: string): Promise<string[]> {
  const [result] = await eslint.lintText(source, { filePath: join(root, path) });
  return result!.messages.filter((message) => message.ruleId?.startsWith('import-x/')).map((message) => `${message.ruleId}: ${message.message}`);
}

describe('package boundaries (eslint.config.js)', () => {
  it('refuse a test that imports another package, however the path is spelled', async () => {
    for (const specifier of ['../../webhook/src/app.js', '../../../services/webhook/src/app.js', '../../../identity/src/app/app.js']) {
      const findings = await boundaryFindings('services/api/test/probe.test.mjs', `import '${specifier}';\n`);
      expect(findings, specifier).toEqual([expect.stringMatching(/^import-x\/no-restricted-paths: .* services\/api may import services\/shared and nothing of another package/)]);
    }
  });

  it('refuse runtime code that imports a test helper or a test file', async () => {
    for (const specifier of ['../../../test/helpers/wait.js', '../test/transaction.test.js']) {
      // A test file under test/ is in both of the zone's globs, and may be named once for each.
      const findings = await boundaryFindings('services/api/src/probe.mjs', `import '${specifier}';\n`);
      expect(findings.length, specifier).toBeGreaterThan(0);
      for (const finding of findings) expect(finding, specifier).toMatch(/^import-x\/no-restricted-paths: .* runtime code may not import tests or test\//);
    }
  });

  it('refuse the ground floor importing a package, and scripts importing a package\'s src/', async () => {
    expect(await boundaryFindings('services/shared/probe.mjs', `import '../api/src/config.js';\n`)).toEqual([
      expect.stringMatching(/^import-x\/no-restricted-paths: .* services\/shared is the ground floor/),
    ]);
    expect(await boundaryFindings('scripts/probe.mjs', `import '../services/webhook/src/app.js';\n`)).toEqual([
      expect.stringMatching(/^import-x\/no-restricted-paths: .* scripts\/ may not import a package's src\//),
    ]);
  });

  it('refuse a relative import that does not resolve, so nothing passes the zones unseen', async () => {
    expect(await boundaryFindings('services/api/src/probe.mjs', `import '../../webhook/src/no-such-file.js';\n`)).toEqual([expect.stringMatching(/^import-x\/no-unresolved:/)]);
  });

  it('refuse an import circle', async () => {
    // db/pool.ts is imported by every service that app.ts registers: importing app.ts back closes a circle.
    const findings = await boundaryFindings('services/api/src/db/pool.ts', `import { createApp } from '../app.js';\nexport const probe = createApp;\n`);
    expect(findings).toEqual([expect.stringMatching(/^import-x\/no-cycle: Dependency cycle/)]);
    // The same import from a file nothing imports closes none.
    expect(await boundaryFindings('services/api/src/probe.ts', `import { createApp } from './app.js';\nexport const probe = createApp;\n`)).toEqual([]);
  });

  it('let through what the rules allow: a package and its tests importing services/shared, a test importing test helpers', async () => {
    expect(await boundaryFindings('services/api/src/probe.mjs', `import '../../shared/errors.js';\nimport './config.js';\n`)).toEqual([]);
    expect(await boundaryFindings('services/webhook/test/probe.test.mjs', `import '../../shared/retry.js';\nimport '../../../test/helpers/wait.js';\n`)).toEqual([]);
  });
});
