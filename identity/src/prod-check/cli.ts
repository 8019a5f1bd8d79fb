import { execFile } from 'node:child_process';
import { basename, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import { ConfigError, runMain } from '../../../services/shared/config.js';
import { runChecklist } from './checklist.js';

/**
 * `npm run identity:prod-check -- [--stack-file infra/Pulumi.<stack>.yaml] [--live] [--send-test-mail ops@example.org]`
 * Every item checks the stack the Pulumi program declares with that stack file (infra/Pulumi.example.yaml
 * without one), never the shell environment of whoever runs it. Prints PASS or FAIL per item, with the reason.
 * --live connects to every auth domain on 443; --send-test-mail sends a mail through the relay, whose
 * URI (smtpConnectionUri) it reads from the stack with `pulumi config get` (the stack named by the file).
 * Exit codes: 0 every item passed, 1 at least one failed (an unreadable or refused stack fails them all),
 * 2 usage (an unknown option, a missing value).
 */

const run = promisify(execFile);

/** A secret of the stack, decrypted by Pulumi itself; undefined when Pulumi cannot (no CLI, no passphrase). */
async function stackSecret(stackFile: string, key: string): Promise<string | undefined> {
  const stack = /^Pulumi\.(.+)\.yaml$/.exec(basename(stackFile))?.[1];
  if (!stack) return undefined;
  try {
    const { stdout } = await run('pulumi', ['config', 'get', key, '--stack', stack], { cwd: dirname(stackFile) });
    return stdout.trim() || undefined;
  } catch {
    return undefined;
  }
}

runMain(async () => {
  let values;
  try {
    ({ values } = parseArgs({ options: { live: { type: 'boolean', default: false }, 'send-test-mail': { type: 'string' }, 'stack-file': { type: 'string' } } }));
  } catch (error) {
    throw new ConfigError(`usage: identity:prod-check -- [--stack-file infra/Pulumi.<stack>.yaml] [--live] [--send-test-mail ADDRESS] (${(error as Error).message})`);
  }
  const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));
  const stackFile = values['stack-file'] ? resolve(values['stack-file']) : undefined;
  const testMailTo = values['send-test-mail'];
  const smtpUri = testMailTo ? await stackSecret(stackFile ?? resolve(repoRoot, 'infra/Pulumi.example.yaml'), 'smtpConnectionUri') : undefined;
  const items = await runChecklist({
    repoRoot,
    live: values.live,
    ...(stackFile ? { stackFile } : {}),
    ...(testMailTo ? { testMailTo } : {}),
    ...(smtpUri ? { smtpUri } : {}),
  });
  for (const entry of items) console.log(`${entry.ok ? 'PASS' : 'FAIL'}  ${entry.name} — ${entry.detail}`);
  const failed = items.filter((i) => !i.ok).length;
  console.log(`${items.length} items: ${items.length - failed} passed, ${failed} failed`);
  if (failed > 0) process.exitCode = 1;
});
