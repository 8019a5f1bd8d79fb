import { defineConfig } from 'vitest/config';

// Each test file runs in its own fork; a worker boots its database once (see test/helpers/db.ts),
// so the slow PGlite start (~10 s) is paid per worker, not per test.
export default defineConfig({
  test: {
    include: ['services/**/*.test.ts', 'identity/**/*.test.ts', 'infra/**/*.test.ts', 'scripts/**/*.test.ts', 'test/**/*.test.ts'],
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 120_000,
    reporters: ['default'],
  },
});
