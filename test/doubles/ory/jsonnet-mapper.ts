import { execFile, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { CONFIG_DIR } from '../../../identity/src/config/config-dir.js';
import type { MappedIdentity } from '../../../services/shared/testing/ory/kratos-double.js';

/**
 * The shipped claims mappers (identity/config/oidc/*.jsonnet) evaluated as Kratos evaluates them: the
 * provider's claims as the Jsonnet external code `claims`, the result's `identity` taken. Uses the
 * `jsonnet` command (Debian package jsonnet); `missingJsonnet()` names it when absent.
 */

const run = promisify(execFile);

export function missingJsonnet(): string | undefined {
  return spawnSync('jsonnet', ['--version']).status === 0 ? undefined : 'the jsonnet command (Debian package jsonnet) to evaluate the claims mappers';
}

export function jsonnetMapper(name: 'generic' | 'github'): (claims: Record<string, unknown>) => Promise<MappedIdentity> {
  const file = join(CONFIG_DIR, 'oidc', `${name}.jsonnet`);
  return async (claims) => {
    const { stdout } = await run('jsonnet', ['--ext-code', `claims=${JSON.stringify(claims)}`, file], { timeout: 10_000 });
    return (JSON.parse(stdout) as { identity: MappedIdentity }).identity;
  };
}
