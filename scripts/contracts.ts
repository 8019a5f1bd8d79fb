/**
 * `npm run contracts [-- --from DIR]`: fills the git-ignored contracts cache (.cache/contracts) with the
 * pinned upstream Ory and GeoServer files, each checked against its sha256 before it is kept. `--from DIR`
 * copies them from a local folder (for example a colleague's ../shared/vendor) instead of downloading.
 *
 * Exit codes: 0 every file is in the cache and matches its pin; 1 some file could not be had or did not
 * match (each named, nothing half-written is kept); 2 usage.
 */
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { CONTRACTS_CACHE_DIR, PINNED_CONTRACTS, pinnedHashMismatch, type PinnedContract } from '../services/shared/contracts.js';

async function fetchBytes(contract: PinnedContract, from: string | undefined): Promise<Buffer> {
  if (from) return readFileSync(join(from, contract.file));
  const response = await fetch(contract.url, { signal: AbortSignal.timeout(30_000) });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  return Buffer.from(await response.arrayBuffer());
}

function describe(error: unknown): string {
  if (error instanceof Error) return error.cause instanceof Error ? `${error.message}: ${error.cause.message}` : error.message;
  return String(error);
}

async function main(): Promise<number> {
  let from: string | undefined;
  try {
    ({ values: { from } } = parseArgs({ options: { from: { type: 'string' } } }));
  } catch (error) {
    console.error(`usage: npm run contracts [-- --from DIR]\n${describe(error)}`);
    return 2;
  }
  let failed = 0;
  for (const contract of PINNED_CONTRACTS) {
    const target = join(CONTRACTS_CACHE_DIR, contract.file);
    try {
      const bytes = await fetchBytes(contract, from);
      const actual = pinnedHashMismatch(contract, bytes);
      if (actual !== undefined) throw new Error(`sha256 ${actual} differs from the pinned ${contract.sha256}`);
      mkdirSync(dirname(target), { recursive: true });
      writeFileSync(`${target}.partial`, bytes);
      renameSync(`${target}.partial`, target);
      console.log(`ok      ${contract.file}`);
    } catch (error) {
      failed += 1;
      rmSync(`${target}.partial`, { force: true });
      console.error(`FAILED  ${contract.file} from ${from ? join(from, contract.file) : contract.url}: ${describe(error)}`);
    }
  }
  if (failed > 0) {
    console.error(
      `${failed} of ${PINNED_CONTRACTS.length} contracts could not be had${from ? '' : ' (no network to the upstream hosts?)'}; ` +
        'set CONTRACTS_DIR to a copy or run again with --from DIR. Tests that need them skip and say so.',
    );
    return 1;
  }
  console.log(`all ${PINNED_CONTRACTS.length} contracts are in ${CONTRACTS_CACHE_DIR}`);
  return 0;
}

process.exitCode = await main();
