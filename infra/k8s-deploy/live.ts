import { mkdirSync, readdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * What the site runs, recorded in the target's deploy directory in the layout the webhook's launcher
 * reads after every deploy (services/webhook/src/deployments/launcher-process.mjs `live`):
 *
 *   <deployDir>/live -> deploys/<release>
 *   <deployDir>/deploys/<release>/REVISION   the commit
 *
 * as deploy-branch.sh leaves a target directory and a builder mirrors it into its spool. Here it is
 * only a record (the site Deployment is the truth): written from the Deployment the driver read or set,
 * each file replaced whole (a temporary name renamed over it), older records removed.
 */

const RELEASE = /^\d{14}$/;

export interface LiveRecord {
  release: string;
  commit: string;
}

export function recordLive(deployDir: string, live: LiveRecord | null): void {
  const deploys = join(deployDir, 'deploys');
  mkdirSync(deploys, { recursive: true, mode: 0o700 });
  const link = join(deployDir, 'live');
  if (live) {
    if (!RELEASE.test(live.release)) throw new Error(`not a release name: ${live.release}`);
    mkdirSync(join(deploys, live.release), { recursive: true, mode: 0o700 });
    const revision = join(deploys, live.release, 'REVISION');
    writeFileSync(`${revision}.tmp-${process.pid}`, `${live.commit}\n`, { mode: 0o600 });
    renameSync(`${revision}.tmp-${process.pid}`, revision);
    const temp = `${link}.tmp-${process.pid}`;
    rmSync(temp, { force: true });
    symlinkSync(`deploys/${live.release}`, temp);
    renameSync(temp, link);
  } else {
    rmSync(link, { force: true });
  }
  for (const name of readdirSync(deploys)) {
    if (RELEASE.test(name) && name !== live?.release) rmSync(join(deploys, name), { recursive: true, force: true });
  }
}
