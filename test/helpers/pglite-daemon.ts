/**
 * An embedded PGlite + PostGIS database for one vitest worker slot, run as its own process so the
 * ~10 s boot is paid once per slot and test run, not once per test file (vitest forks a fresh
 * process per file). Started by test/helpers/db.ts; not for other use.
 *
 * argv: <registry file> <pid of the vitest main process>
 * Prints one JSON line {"url": …} when it listens, writes the same to the registry file, and exits
 * as soon as the vitest main process is gone, so no database outlives its test run.
 */
import { rmSync, writeFileSync } from 'node:fs';
import { startEmbeddedDatabase } from '../../services/api/src/db/embedded.js';

const [registryFile, ownerPidText] = process.argv.slice(2);
const ownerPid = Number(ownerPidText);
if (!registryFile || !Number.isInteger(ownerPid)) {
  console.error('usage: pglite-daemon.ts <registry file> <owner pid>');
  process.exit(2);
}

const database = await startEmbeddedDatabase();
const line = JSON.stringify({ url: database.url, pid: process.pid });
writeFileSync(registryFile, line);
process.stdout.write(`${line}\n`);

const ownerAlive = (): boolean => {
  try {
    process.kill(ownerPid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
};

const stop = async () => {
  rmSync(registryFile, { force: true });
  rmSync(`${registryFile}.log`, { force: true });
  await database.close().catch(() => undefined);
  process.exit(0);
};
setInterval(() => {
  if (!ownerAlive()) void stop();
}, 500);
process.on('SIGTERM', () => void stop());
