/**
 * The V8 flags the API's process runs with, wherever it runs: the image's command
 * (infra/docker/api.Dockerfile CMD, which infra/test/dockerfiles.test.ts holds to this list), `npm
 * start` (scripts/start.ts) and the benchmarks (bench/support.ts). Node reads neither of them from
 * NODE_OPTIONS, so each starter passes them on node's command line. `npm run bench -- node-flags`
 * measures what a flag does; docs/api.md, "The API's V8 flags", has the figures.
 *
 * `--no-allocation-site-pretenuring`: without it, a process that gets the 1 000-feature list right
 * after it starts (a replica a rolling deploy or a scale-up sends traffic the moment it is ready)
 * can have V8 switch the page's allocation sites to allocate straight into the old generation, for
 * good, and then spends about 1.7× the CPU per list request in the garbage collector.
 *
 * `--max-semi-space-size=16` (MiB): Node sizes V8's heap from the memory the process may use, the
 * container's limit included, and in the stack's 512 MB API container that leaves 1 MiB
 * semi-spaces (16 MiB on a machine without a limit). Every list page's rows then outgrow the young
 * generation and are copied into the old one: the list costs 1.7× the CPU per request with 1 MiB,
 * 1.5× with 4 MiB. Stated, the young generation is the same in a container as on the machine the
 * benchmarks run on.
 */
export const API_NODE_FLAGS: readonly string[] = ['--no-allocation-site-pretenuring', '--max-semi-space-size=16'];
