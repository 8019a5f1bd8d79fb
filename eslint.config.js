// Lint rules: the recommended sets, type-aware where it catches real bugs (floating promises in servers),
// and the package boundaries checked on resolved paths (.ts, .mjs and the .astro pages alike).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';
import astro from 'eslint-plugin-astro';
import { createNodeResolver, importX } from 'eslint-plugin-import-x';

const CODE = ['**/*.{ts,mts,cts,js,mjs,cjs}', '**/*.astro'];
/** Tests and what only tests use: test files, any test/ folder, the benchmarks. Everything else is runtime code. */
const TEST_CODE = ['**/*.test.{ts,mts,js,mjs}', '**/test/**', 'bench/**'];

// Packages meet only through services/shared: an image copies shared + its own package, so an import
// into another package is a crash at start in production (the wave-1 ERR_MODULE_NOT_FOUND). The zones
// are matched on the resolved file, so `../../../webhook/src/x.js` is caught however it is spelled.
const PACKAGES = ['services/api', 'services/webhook', 'services/web', 'identity', 'infra'];
const PACKAGE_ZONES = [
  ...PACKAGES.map((pkg) => ({
    target: `./${pkg}`,
    from: PACKAGES.filter((other) => other !== pkg).map((other) => `./${other}`),
    message: `${pkg} may import services/shared and nothing of another package: move what both need to services/shared.`,
  })),
  {
    target: './services/shared',
    from: PACKAGES.map((pkg) => `./${pkg}`),
    message: 'services/shared is the ground floor: it imports no package (have the caller pass what it needs).',
  },
  {
    // Tools start services as processes; they may use a package's launcher, never its src/.
    target: './scripts',
    from: PACKAGES.map((pkg) => `./${pkg}/src`),
    message: 'scripts/ may not import a package\'s src/: start the service as a process, or move what both need to services/shared.',
  },
];
/** The folders the service images are built from (package.json build:services). */
const SHIPPED = ['services/shared', 'services/api', 'services/webhook', 'identity', 'infra/geoserver', 'infra/sites', 'infra/k8s-deploy', 'config'];
// Runtime code never depends on tests: a test helper or double that runtime code needs moves out of test/.
const RUNTIME_ZONE = {
  target: '.',
  from: ['**/test/**', '**/*.test.{ts,mts,js,mjs}'],
  message: 'runtime code may not import tests or test/: move what it needs to a runtime folder (e.g. services/shared/testing).',
};

const boundaries = (zones) => ({
  'import-x/no-restricted-paths': ['error', { basePath: import.meta.dirname, zones }],
  // A relative import that does not resolve would pass the zones unseen: resolve every one of them.
  'import-x/no-unresolved': ['error', { ignore: ['^[^.]'] }],
  // Every package imported is declared in package.json (axios once arrived only through the Ory clients).
  'import-x/no-extraneous-dependencies': ['error', { devDependencies: true, packageDir: import.meta.dirname }],
  // No import circles (ES modules evaluated half-way). The rule passes over type-only imports; none
  // form a circle today either: a type two modules share lives in a module of its own (qc/jobs/task-deps.ts).
  'import-x/no-cycle': ['error', { ignoreExternal: true }],
});

export default tseslint.config(
  { ignores: ['node_modules/', 'data/', 'coverage/', '**/dist/', 'test/fixtures/**/node_modules/', 'services/web/.astro/', '.cache/'] /* .cache: npm start's compiled bundles, the contracts, the database image */ },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node } },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'no-console': 'off',
      eqeqeq: ['error', 'always'],
    },
  },
  {
    files: ['**/*.ts'],
    // The <script> blocks of .astro files arrive as virtual `Page.astro/1_1.ts` files: no tsconfig has them.
    ignores: ['test/fixtures/**', '**/*.astro/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false } }],
    },
  },
  // .astro: the frontmatter through astro-eslint-parser, each <script> block through the plugin's processor.
  ...astro.configs['flat/base'],
  {
    files: CODE,
    plugins: { 'import-x': importX },
    settings: {
      'import-x/extensions': ['.ts', '.mts', '.cts', '.js', '.mjs', '.cjs', '.astro'],
      'import-x/resolver-next': [
        createNodeResolver({
          extensions: ['.ts', '.mts', '.cts', '.js', '.mjs', '.cjs', '.json', '.astro'],
          // NodeNext spelling: `./x.js` names x.ts.
          extensionAlias: { '.js': ['.ts', '.js'], '.mjs': ['.mts', '.mjs'], '.cjs': ['.cts', '.cjs'] },
        }),
      ],
    },
  },
  { files: CODE, ignores: TEST_CODE, rules: boundaries([...PACKAGE_ZONES, RUNTIME_ZONE]) },
  { files: TEST_CODE, rules: boundaries(PACKAGE_ZONES) },
  {
    // What the images ship (infra/docker/build.ts: these folders less tests and testing/) runs after
    // `npm prune --omit=dev`: an import of a devDependency there is a crash at start in production.
    files: SHIPPED.map((dir) => `${dir}/**/*.{ts,mts,js,mjs}`),
    ignores: [...TEST_CODE, '**/testing/**'],
    rules: { 'import-x/no-extraneous-dependencies': ['error', { devDependencies: false, packageDir: import.meta.dirname }] },
  },
);
