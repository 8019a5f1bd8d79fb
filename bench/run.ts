/**
 * `npm run bench [-- name…]`: runs every bench/*.bench.ts (or those whose name contains one of the
 * arguments) one after the other, each in its own process so one benchmark's heap and pools do not
 * colour the next. Each benchmark measures its own baseline in the same run and prints ratios.
 * Exit code: 0 when all ran, 1 when any failed.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const filters = process.argv.slice(2);
const benches = readdirSync(here)
  .filter((f) => f.endsWith('.bench.ts'))
  .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)))
  .sort();

if (benches.length === 0) {
  console.error(`no benchmark matches ${filters.join(', ') || '(all)'}`);
  process.exit(2);
}

let failed = 0;
for (const file of benches) {
  console.log(`\n=== ${file}`);
  const run = spawnSync(process.execPath, ['--import', 'tsx', '--expose-gc', join(here, file)], { stdio: 'inherit' });
  if (run.status !== 0) {
    failed++;
    console.error(`${file} failed with ${run.status ?? run.signal}`);
  }
}
process.exit(failed ? 1 : 0);
