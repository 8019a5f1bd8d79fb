import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { describeDeclaredStack } from './declared.js';

/**
 * `npx tsx infra/describe-cli.ts [--stack-file infra/Pulumi.<stack>.yaml]`: prints the declared stack
 * (every container with its image, ports, networks, environment and uploaded files, the networks, the
 * Caddyfile, the targets) as JSON, from the Pulumi program under the runtime mocks. Secrets are
 * placeholders. Used by `npm run identity:prod-check`.
 * Exit codes: 0 printed, 2 the stack configuration is refused (the reason on stderr), 1 anything else.
 */
const failures: string[] = [];
// A rule the program checks inside an Output (an operator-set secret) fails as a rejected promise.
process.on('unhandledRejection', (reason) => failures.push(reason instanceof Error ? reason.message : String(reason)));

const { values } = parseArgs({ options: { 'stack-file': { type: 'string' } } });
try {
  const declared = await describeDeclaredStack(values['stack-file'] ? resolve(values['stack-file']) : undefined);
  await new Promise((done) => setTimeout(done, 50));
  if (failures.length > 0) {
    console.error(`stack configuration refused: ${failures.join('; ')}`);
    process.exit(2);
  }
  process.stdout.write(`${JSON.stringify(declared)}\n`);
} catch (error) {
  const message = error instanceof Error ? error.message : String(error);
  console.error(/invalid stack configuration|config /.test(message) ? `stack configuration refused: ${message}` : message);
  process.exit(/invalid stack configuration|config /.test(message) ? 2 : 1);
}
