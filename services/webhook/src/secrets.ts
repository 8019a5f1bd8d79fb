/**
 * Webhook secrets: one shared secret per target, named by the target's `secret` field (an
 * environment variable name such as SECRET_MAIN). During a rotation `<NAME>_PREVIOUS` holds the old
 * secret and both are accepted until it is removed.
 *
 * Sources: the secrets file (WEBHOOK_SECRETS_FILE, KEY=value lines, must be mode 600) and the
 * process environment; the file wins when both name a variable.
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { ConfigError } from '../../shared/config.js';
import type { Target } from '../../shared/targets.js';

export const previousSecretName = (name: string): string => `${name}_PREVIOUS`;

/** Entropy an accepted secret must be able to hold: 32 random bytes, as `secrets init` generates (64 hex). */
const MIN_SECRET_BITS = 256;

/**
 * Why a secret is too weak to sign deploys, or null. The estimate is an upper bound (length times
 * the bits of the alphabet it uses), so it refuses what is surely weak: too short for 256 bits
 * (e.g. fewer than 64 hex characters), few distinct characters, a repeated unit
 * (password-password-…), a run like abcdef… or 0123…, or a placeholder word.
 */
export function secretWeakness(value: string): string | null {
  const hex = /^[0-9a-f]+$/i.test(value);
  const alphabet = hex
    ? 16
    : (/[a-z]/.test(value) ? 26 : 0) + (/[A-Z]/.test(value) ? 26 : 0) + (/[0-9]/.test(value) ? 10 : 0) + (/[^a-zA-Z0-9]/.test(value) ? 33 : 0);
  const bits = Math.floor(value.length * Math.log2(Math.max(alphabet, 2)));
  if (bits < MIN_SECRET_BITS) {
    return hex
      ? `is ${value.length} hex characters; at least 64 (32 random bytes) are needed`
      : `holds at most ${bits} bits; at least ${MIN_SECRET_BITS} (32 random bytes, e.g. 64 hex characters) are needed`;
  }
  if (new Set(value).size < 10) return 'uses fewer than 10 distinct characters';
  if (/^(.+?)\1+$/s.test(value)) return 'is one piece repeated';
  let run = 1;
  for (let i = 1; i < value.length; i++) {
    const step = value.charCodeAt(i) - value.charCodeAt(i - 1);
    run = step === 1 || step === -1 || step === 0 ? run + 1 : 1;
    if (run >= 12) return 'contains a run of 12 or more consecutive or repeated characters';
  }
  if (/password|secret|changeme|example|letmein|qwerty/i.test(value)) return 'contains a placeholder word';
  return null;
}

/** Read a secrets env file, refusing it when group or others have any access to it. */
export function readSecretsFile(path: string): Record<string, string> {
  let mode: number;
  try {
    mode = statSync(path).mode & 0o777;
  } catch (cause) {
    throw new ConfigError(`WEBHOOK_SECRETS_FILE: cannot read ${path}: ${(cause as Error).message}`, { cause });
  }
  if (mode & 0o077) {
    throw new ConfigError(
      `WEBHOOK_SECRETS_FILE: ${path} has mode ${mode.toString(8).padStart(3, '0')}, readable by group or others; run chmod 600 ${path}`,
    );
  }
  return parseSecretsFile(readFileSync(path, 'utf8'), path);
}

export function parseSecretsFile(text: string, path = 'secrets file'): Record<string, string> {
  const values: Record<string, string> = {};
  text.split('\n').forEach((raw, index) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const match = /^([A-Z][A-Z0-9_]*)=(.*)$/.exec(line);
    if (!match) throw new ConfigError(`${path}: line ${index + 1} is not NAME=value`);
    values[match[1]!] = match[2]!.replace(/^(['"])(.*)\1$/, '$2');
  });
  return values;
}

export function formatSecretsFile(values: Record<string, string>): string {
  const header = '# Webhook secrets, one per target (32 random bytes, hex). Keep this file mode 600.\n';
  return header + Object.entries(values).map(([name, value]) => `${name}=${value}\n`).join('');
}

/** Write the secrets file atomically and with mode 600 from the first byte. */
export function writeSecretsFile(path: string, values: Record<string, string>): void {
  const temporary = `${path}.tmp-${process.pid}`;
  writeFileSync(temporary, formatSecretsFile(values), { mode: 0o600, flag: 'w' });
  chmodSync(temporary, 0o600);
  renameSync(temporary, path);
}

export const newSecret = (): string => randomBytes(32).toString('hex');

/** A fresh secret for every target, keyed by the variable name. */
export function generateSecrets(targets: readonly Target[]): Record<string, string> {
  return Object.fromEntries(targets.map((t) => [t.secret, newSecret()]));
}

/**
 * Secrets generated for `npm start`: never in production, where an operator must provision them
 * (a restart would otherwise silently invalidate every hook's secret).
 */
export function createDevelopmentSecrets(targets: readonly Target[], env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  if (env.NODE_ENV === 'production') {
    throw new ConfigError('NODE_ENV=production: development webhook secrets are refused; set WEBHOOK_SECRETS_FILE');
  }
  return generateSecrets(targets);
}

/** Rotation step 1: the current secret becomes <NAME>_PREVIOUS, a new one becomes current. */
export function rotateSecret(values: Record<string, string>, name: string): Record<string, string> {
  const current = values[name];
  if (!current) throw new ConfigError(`${name} is not in the secrets file`);
  return { ...values, [name]: newSecret(), [previousSecretName(name)]: current };
}

/** Rotation step 2, once the Git host sends the new secret: forget the previous one. */
export function finishRotation(values: Record<string, string>, name: string): Record<string, string> {
  const { [previousSecretName(name)]: _dropped, ...rest } = values;
  return rest;
}

/** The accepted secrets of each target (current first, then previous), checked for presence and strength. */
export type TargetSecretMap = ReadonlyMap<string, readonly string[]>;

export function resolveTargetSecrets(targets: readonly Target[], source: Record<string, string | undefined>): TargetSecretMap {
  const resolved = new Map<string, string[]>();
  const owners = new Map<string, string>();
  for (const target of targets) {
    const accepted: string[] = [];
    for (const name of [target.secret, previousSecretName(target.secret)]) {
      const value = source[name];
      if (value === undefined || value === '') {
        if (name === target.secret) throw new ConfigError(`missing secret: ${name} (target ${target.key}) is not set`);
        continue;
      }
      const weakness = secretWeakness(value);
      if (weakness) throw new ConfigError(`${name} (target ${target.key}): the secret ${weakness}; generate one with npm run host -- secrets add`);
      // One secret for two targets would let either team deploy the other's site.
      const owner = owners.get(value);
      if (owner && owner !== target.key) throw new ConfigError(`${name}: the same secret is also used by target ${owner}`);
      owners.set(value, target.key);
      accepted.push(value);
    }
    resolved.set(target.key, accepted);
  }
  return resolved;
}

/** Load the secrets from the file (when configured) over the environment. */
export function loadTargetSecrets(
  targets: readonly Target[],
  secretsFile: string | undefined,
  env: NodeJS.ProcessEnv,
): TargetSecretMap {
  const fromFile = secretsFile ? readSecretsFile(secretsFile) : {};
  return resolveTargetSecrets(targets, { ...env, ...fromFile });
}

/** Every variable name that may hold a secret, so they can be kept out of child processes. */
export function secretVariableNames(targets: readonly Target[]): string[] {
  return targets.flatMap((t) => [t.secret, previousSecretName(t.secret)]);
}
