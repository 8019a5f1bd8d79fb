/**
 * An embedded PGlite + PostGIS database for one vitest worker slot, run as its own process so the
 * ~10 s boot is paid once per slot and test run, not once per test file (vitest forks a fresh
 * process per file). Started by test/helpers/db.ts; not for other use.
 *
 * argv: <registry file> <pid of the vitest main process> <its log file>
 * Prints one JSON line {"url": …} when it listens, writes the same to the registry file, and exits
 * as soon as the vitest main process is gone, so no database outlives its test run. Its stderr goes
 * to the log file, which a clean exit removes and a crash leaves behind for diagnosis.
 */
import { rmSync, writeFileSync } from 'node:fs';
import { startEmbeddedDatabase } from '../../services/api/src/db/embedded.js';

const [registryFile, ownerPidText, logFile] = process.argv.slice(2);
const ownerPid = Number(ownerPidText);
if (!registryFile || !Number.isInteger(ownerPid) || !logFile) {
  console.error('usage: pglite-daemon.ts <registry file> <owner pid> <log file>');
  process.exit(2);
}

const database = await startEmbeddedDatabase();
const line = JSON.stringify({ url: database.url, pid: process.pid });
writeFileSync(registryFile, line);
process.stdout.write(`${line}\n`);
// The spawning fork closes its end after reading that line; a later write (a notice printed by
// PGlite) must not kill the database with EPIPE.
process.stdout.on('error', () => undefined);

const ownerAlive = (): boolean => {
  try {
    process.kill(ownerPid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
};

process.on('uncaughtException', (error) => {
  console.error('daemon: uncaught exception', error);
  process.exit(1);
});
process.on('unhandledRejection', (error) => console.error('daemon: unhandled rejection', error));
console.error(`daemon ${process.pid}: listening at ${database.url}`);

const stop = async (reason: string) => {
  console.error(`daemon: stopping (${reason})`);
  rmSync(registryFile, { force: true });
  rmSync(logFile, { force: true });
  await database.close().catch(() => undefined);
  process.exit(0);
};
setInterval(() => {
  if (!ownerAlive()) void stop('owner gone');
}, 500);
process.on('SIGTERM', () => void stop('SIGTERM'));
