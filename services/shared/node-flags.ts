/**
 * The V8 flags the API's process runs with, wherever it runs: the image's command
 * (infra/docker/api.Dockerfile CMD, which infra/test/dockerfiles.test.ts holds to this list), `npm
 * start` (scripts/start.ts) and the benchmarks (bench/support.ts). Node reads none of them from
 * NODE_OPTIONS, so each starter passes them on node's command line.
 *
 * `--no-allocation-site-pretenuring`: without it, a process that gets the 1 000-feature list right
 * after it starts (a replica a rolling deploy or a scale-up sends traffic the moment it is ready)
 * has V8 switch the page's allocation sites to allocate straight into the old generation, for good,
 * and then spends about 1.7× the CPU per list request in the garbage collector. Measured in
 * docs/api.md, "Why two processes of one build differ", with its cost in steady state.
 */
export const API_NODE_FLAGS: readonly string[] = ['--no-allocation-site-pretenuring'];
