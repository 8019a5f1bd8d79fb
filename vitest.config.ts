import { configDefaults, defineConfig } from 'vitest/config';

// Each test file runs in a fork; a worker boots its database once (see test/helpers/db.ts), so the
// slow PGlite start (~10 s) is paid per worker, not per test.
//
// Two projects share the two workers (maxWorkers is for the whole run):
// - shared: every file not listed in ISOLATED runs in a fork that is kept from one file to the next
//   (isolate: false), so node_modules and the app's modules are loaded once per fork and not once per
//   file. Each file still starts its own database, API, servers and browser, as before.
// - isolated: the ISOLATED files, each in a fork of its own.
// A file may be shared when it leaves nothing process-wide behind for the next file in its fork: no
// process.env assignment, process.on listener, stubbed global or timer (vi.mock, vi.stubGlobal,
// vi.useFakeTimers), Pulumi mocks, or client, server or child left running after its afterAll.
// test/helpers/shared-fork-guard.ts fails a shared file that changes process.env, the working
// directory, process listeners or globals and does not undo it.
// Why: the 88 shared files under 3 s, interleaved runs at load 4-8: 137 s and 149 s each in its own
// fork, 66 s and 82 s in kept forks (module import 66-72 s → 15-16 s).
const TEST_FILES = ['services/**/*.test.ts', 'identity/**/*.test.ts', 'infra/**/*.test.ts', 'scripts/**/*.test.ts', 'test/**/*.test.ts'];

const ISOLATED = [
  // Pulumi's runtime mocks (infra/testing/pulumi-mocks.ts) are process-wide: one stack per process.
  'infra/test/stack*.test.ts',
  'infra/test/example-config.test.ts',
  'infra/test/dockerfiles.test.ts',
  // Imports infra/k8s, which loads Pulumi's runtime: its leak monitor adds a process 'exit' listener.
  'test/journeys/k8s-deploy.test.ts',
  // The stack rehearsal: not checked for sharing. (The QC worker's tests were here too; run shared,
  // the guard passes all 17 and they take 35 s instead of 49, module import 17 s → 5 s.)
  'infra/test/rehearsal/**/*.test.ts',
  // Whole processes started as npm start and the image start them, and signal handling.
  'services/api/test/npm-start.test.ts',
  'services/api/test/embedded-image.test.ts',
  'services/shared/test/shutdown.test.ts',
  // They time the in-process server (/healthz within 250 ms during an import, a request budget per
  // hostile body): a kept fork's heap, grown by the files before, adds garbage-collection pauses.
  'services/api/test/imports.test.ts',
  'services/api/test/hostile-bodies.test.ts',
  'services/webhook/test/hostile-bodies.test.ts',
  // Docker and the Ory images.
  'identity/test/e2e-docker.test.ts',
  // Loads eslint.config.js, whose Astro plugin starts the Astro compiler's Go WebAssembly runtime:
  // it defines globalThis.fs for good.
  'test/journeys/package-boundaries.test.ts',
];

export default defineConfig({
  test: {
    pool: 'forks',
    maxWorkers: 2,
    // A temporary folder of the run's own, removed at its end (test/helpers/run-tmpdir.ts).
    globalSetup: ['test/helpers/run-tmpdir.ts'],
    testTimeout: 30_000,
    hookTimeout: 120_000,
    reporters: ['default'],
    projects: [
      {
        extends: true,
        test: { name: 'shared', isolate: false, setupFiles: ['test/helpers/shared-fork-guard.ts'], include: TEST_FILES, exclude: [...configDefaults.exclude, ...ISOLATED] },
      },
      { extends: true, test: { name: 'isolated', isolate: true, include: ISOLATED } },
    ],
  },
});
