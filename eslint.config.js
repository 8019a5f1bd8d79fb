// Lint rules: the recommended sets, type-aware where it catches real bugs (floating promises in servers).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

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
    ignores: ['test/fixtures/**'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false } }],
    },
  },
  // Packages meet only through services/shared: an image copies shared + its own package, so an import
  // into another package's src/ is a crash at start in production (the wave-1 ERR_MODULE_NOT_FOUND).
  ...packageBoundaries([
    ['services/api', ['identity', 'services/webhook', 'services/web', 'infra']],
    ['services/webhook', ['identity', 'services/api', 'services/web', 'infra']],
    ['services/web', ['identity', 'services/api', 'services/webhook', 'infra']],
    ['identity', ['services/api', 'services/webhook', 'services/web', 'infra']],
    ['infra', ['identity/src', 'services/api', 'services/webhook', 'services/web']],
    ['scripts', ['identity/src', 'services/api/src', 'services/webhook/src', 'services/web/src']],
  ]),
);

/** One no-restricted-imports block per package: its files may not import the listed folders. */
function packageBoundaries(rules) {
  return rules.map(([pkg, forbidden]) => ({
    files: [`${pkg}/**/*.ts`],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: forbidden.map((folder) => ({
            regex: `^(\\.\\./)+${folder.replace('/', '\\/')}(\\/|$)`,
            message: `${pkg} may not import ${folder}: move what both need to services/shared.`,
          })),
        },
      ],
    },
  }));
}
