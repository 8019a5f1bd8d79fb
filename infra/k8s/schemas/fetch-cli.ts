/**
 * `node --import tsx infra/k8s/schemas/fetch-cli.ts [--from DIR]`: fills the git-ignored cache
 * (.cache/k8s-schemas) with the pinned Ory charts' default values (infra/k8s/schemas/pins.ts), each
 * checked against its sha256 before it is kept. `--from DIR` copies them from a folder with the same layout (a colleague's
 * cache, ../shared/vendor/k8s-schemas) instead of downloading.
 *
 * Exit codes: 0 every file is in the cache and matches its pin; 1 some file could not be had or did not
 * match (each named, nothing half-written is kept); 2 usage.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { PINNED_SCHEMAS, SCHEMAS_CACHE_DIR, type PinnedSchema } from './pins.js';

async function bytesOf(pin: PinnedSchema, from: string | undefined): Promise<Buffer> {
  if (from) return readFileSync(join(from, pin.file));
  const response = await fetch(pin.url, { signal: AbortSignal.timeout(60_000) });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  return Buffer.from(await response.arrayBuffer());
}

const describe = (error: unknown) => (error instanceof Error ? (error.cause instanceof Error ? `${error.message}: ${error.cause.message}` : error.message) : String(error));

async function main(): Promise<number> {
  let from: string | undefined;
  try {
    ({ values: { from } } = parseArgs({ options: { from: { type: 'string' } } }));
  } catch (error) {
    console.error(`usage: node --import tsx infra/k8s/schemas/fetch-cli.ts [--from DIR]\n${describe(error)}`);
    return 2;
  }
  let failed = 0;
  for (const pin of Object.values(PINNED_SCHEMAS)) {
    const target = join(SCHEMAS_CACHE_DIR, pin.file);
    try {
      const bytes = await bytesOf(pin, from);
      const actual = createHash('sha256').update(bytes).digest('hex');
      if (actual !== pin.sha256) throw new Error(`sha256 ${actual} differs from the pinned ${pin.sha256}`);
      mkdirSync(dirname(target), { recursive: true });
      writeFileSync(`${target}.partial`, bytes);
      renameSync(`${target}.partial`, target);
      console.log(`ok      ${pin.file}`);
    } catch (error) {
      failed += 1;
      rmSync(`${target}.partial`, { force: true });
      console.error(`FAILED  ${pin.file} from ${from ? join(from, pin.file) : pin.url}: ${describe(error)}`);
    }
  }
  const total = Object.keys(PINNED_SCHEMAS).length;
  if (failed > 0) {
    console.error(`${failed} of ${total} chart files could not be had; set K8S_SCHEMAS_DIR to a copy or run again with --from DIR. The chart-values test skips and says so.`);
    return 1;
  }
  console.log(`all ${total} chart files are in ${SCHEMAS_CACHE_DIR}`);
  return 0;
}

process.exitCode = await main();
