import { accessSync, constants, existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { locateContracts } from '../../services/shared/contracts.js';

/**
 * What a test needs from the machine beyond Node. On a fresh clone with only Node these are missing, and
 * a test that needs one skips with ONE printed line naming what is missing and how to get it (.ci/run
 * installs all of them, so CI skips nothing this machine can run).
 */
export type Requirement = { ok: true } | { ok: false; reason: string };

function onPath(name: string): boolean {
  return (process.env.PATH ?? '').split(delimiter).some((dir) => {
    try {
      accessSync(join(dir, name), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

/** An executable on PATH; the hint says how to install it. */
export function binary(name: string, hint = `apt-get install ${name}`): Requirement {
  return onPath(name) ? { ok: true } : { ok: false, reason: `\`${name}\` is not installed (${hint})` };
}

export const requirements = {
  caddy: () => binary('caddy'),
  shellcheck: () => binary('shellcheck'),
  systemdAnalyze: () => binary('systemd-analyze', 'apt-get install systemd'),
  gdal: () => binary('ogr2ogr', 'apt-get install gdal-bin'),
  chromium: (): Requirement => {
    const path = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
    return existsSync(path) ? { ok: true } : { ok: false, reason: `no Chromium at ${path} (apt-get install chromium, or set CHROMIUM_PATH)` };
  },
  /** Running as root; `why` names what needs it (.ci/run runs the suite as root). */
  root: (why: string): Requirement =>
    process.getuid?.() === 0 ? { ok: true } : { ok: false, reason: `not running as root (${why} need it); run the suite as root, as .ci/run does` },
  /**
   * A PostgreSQL server at TEST_DATABASE_URL (.ci/run starts one, with PostGIS). Most database tests
   * fall back to the embedded PGlite (test/helpers/db.ts); these are the ones that cannot, and `why`
   * says what they need of a server.
   */
  postgres: (why: string): Requirement => (process.env.TEST_DATABASE_URL ? { ok: true } : { ok: false, reason: `TEST_DATABASE_URL is not set (${why})` }),
  contracts: (): Requirement => {
    const location = locateContracts();
    return location.ok ? { ok: true } : { ok: false, reason: location.reason };
  },
};

/** The reason of the first requirement not met, or undefined when all are met. */
export function firstMissing(...needs: Requirement[]): string | undefined {
  return needs.find((need): need is { ok: false; reason: string } => !need.ok)?.reason;
}

const announced = new Set<string>();

/**
 * True when the tests named by `what` must skip; then prints one line (once per process and subject)
 * naming the first missing requirement. Use as `describe.skipIf(lacks('the Caddy tests', requirements.caddy()))`.
 */
export function lacks(what: string, ...needs: Requirement[]): boolean {
  const missing = firstMissing(...needs);
  if (missing === undefined) return false;
  const line = `skipping ${what}: ${missing}`;
  if (!announced.has(line)) {
    announced.add(line);
    console.log(line);
  }
  return true;
}
