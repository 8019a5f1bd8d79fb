import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The upstream contracts the platform is checked against but cannot run here: Ory Kratos and Hydra v26.2.0
 * (config schemas and OpenAPI specs) and GeoServer's REST API documentation. Each is pinned to an upstream
 * commit and a sha256, so a copy from anywhere is the same bytes.
 *
 * Where they are found, first complete folder wins:
 *   1. CONTRACTS_DIR (an operator's or CI's copy);
 *   2. `.cache/contracts/` in the repository, git-ignored, filled by `npm run contracts`;
 *   3. `../shared/vendor/` beside the repository (the development workspace).
 * A folder counts only when every pinned file is in it, so a half-filled cache never shadows a good copy.
 * The folder that wins is checked file by file against the pins before anything reads it, wherever it
 * was found: a changed copy is refused (ContractMismatchError naming each file and both hashes), never
 * skipped past, since a double that answers from a different contract would let wrong requests pass.
 */

export interface PinnedContract {
  /** Path inside a contracts folder (the layout of ../shared/vendor). */
  file: string;
  url: string;
  sha256: string;
}

export const PINNED_CONTRACTS: readonly PinnedContract[] = [
  { file: 'geoserver-rest/datastores.yaml', url: 'https://raw.githubusercontent.com/geoserver/geoserver/0101feff29d7bb750719325eb81c5d953227ed2e/doc/en/api/1.0.0/datastores.yaml', sha256: 'ec3df5adc71f17c7af7a935c1650d88b2995c9549e1db88742e009a5b2db99f5' },
  { file: 'geoserver-rest/featuretypes.yaml', url: 'https://raw.githubusercontent.com/geoserver/geoserver/2909a9701a54524a225e7c1a358cf5298e18b2bf/doc/en/api/1.0.0/featuretypes.yaml', sha256: '292cf610a97ac5598c47f491267b6dec0c653983d5ae18b50c3cba6ead28bc36' },
  { file: 'geoserver-rest/layers.yaml', url: 'https://raw.githubusercontent.com/geoserver/geoserver/f351f6349b4333a3192eea73e98e4c3585328106/doc/en/api/1.0.0/layers.yaml', sha256: '38ab2092064bb4e6cfaaf86a39bc256fa8de7bfb87ff2d43a0b44a266834f3ec' },
  { file: 'geoserver-rest/owsservices.yaml', url: 'https://raw.githubusercontent.com/geoserver/geoserver/4720e7fe8d5c10e569c2d7a7387b308a3740bf83/doc/en/api/1.0.0/owsservices.yaml', sha256: 'c645d49aadb9f88cb561ad323ca5e9a772c50cf29cf3e833559705f8d986a43b' },
  { file: 'geoserver-rest/reload.yaml', url: 'https://raw.githubusercontent.com/geoserver/geoserver/99a410d3ab8644034790440ce326ee9ae5103d7d/doc/en/api/1.0.0/reload.yaml', sha256: 'ed7e5b482ab2e0e1c4b9a6f99cbe90fc939ac55172936d6461def5bb15cd334b' },
  { file: 'geoserver-rest/security.yaml', url: 'https://raw.githubusercontent.com/geoserver/geoserver/c07f557af3c2a2967f029dc05e49d17314273a2a/doc/en/api/1.0.0/security.yaml', sha256: 'fcf8da349b644dbee3a344adc63251708565d7ccbb0e4cf0979bf339d91c4e27' },
  { file: 'geoserver-rest/settings.yaml', url: 'https://raw.githubusercontent.com/geoserver/geoserver/2909a9701a54524a225e7c1a358cf5298e18b2bf/doc/en/api/1.0.0/settings.yaml', sha256: '3cc9773e19718768b8b6974b82e3bb7fe0d54ac914b65409e878b23541a87d62' },
  { file: 'geoserver-rest/styles.yaml', url: 'https://raw.githubusercontent.com/geoserver/geoserver/85fba66d7c73cb5af68dac30e6c34f4edf4b3dbf/doc/en/api/1.0.0/styles.yaml', sha256: 'efa43a54127326c30fdb9a7acd6d861514131d94a1103b0259cc2a941a01aed3' },
  { file: 'geoserver-rest/system-status.yaml', url: 'https://raw.githubusercontent.com/geoserver/geoserver/a93804846b1b5c7e3f6e742ac35b087fdd462687/doc/en/api/1.0.0/system-status.yaml', sha256: '4e23279522e9c47060bdf75fc4102dbb273e785d14ed97d208cc71ebc6260dd6' },
  { file: 'geoserver-rest/workspaces.yaml', url: 'https://raw.githubusercontent.com/geoserver/geoserver/4656eca1e582f97f2edbcb883da51e405b88f98f/doc/en/api/1.0.0/workspaces.yaml', sha256: '2e3b6a531d49e8e458e4f33b1bbf37a4f3542f5e865ee07cc6f40eb9b949eabf' },
  { file: 'ory/hydra-v26.2.0/oryx__configx__cors.schema.json', url: 'https://raw.githubusercontent.com/ory/hydra/0b84568fffccf151dc5e6c7955fdfb738555bf4b/oryx/configx/cors.schema.json', sha256: '55229ecd189610d36736a76db2df93a4fea92c3500ab05a7940129a859699815' },
  { file: 'ory/hydra-v26.2.0/oryx__configx__serve.schema.json', url: 'https://raw.githubusercontent.com/ory/hydra/0b84568fffccf151dc5e6c7955fdfb738555bf4b/oryx/configx/serve.schema.json', sha256: '4325e992b0eac8d16b2436c3cb613ffd296ebdb313f3f45ee861194012847858' },
  { file: 'ory/hydra-v26.2.0/oryx__configx__tls.schema.json', url: 'https://raw.githubusercontent.com/ory/hydra/0b84568fffccf151dc5e6c7955fdfb738555bf4b/oryx/configx/tls.schema.json', sha256: '7394156025b75e56a585a0390dac4100f67f90a7259857713b654a0ae99a267c' },
  { file: 'ory/hydra-v26.2.0/oryx__otelx__config.schema.json', url: 'https://raw.githubusercontent.com/ory/hydra/0b84568fffccf151dc5e6c7955fdfb738555bf4b/oryx/otelx/config.schema.json', sha256: '2e6b4567e1d11f3bc4324339d611ddacf6305f63089e7bf6859c61bc5b05d5d1' },
  { file: 'ory/hydra-v26.2.0/schema__config.schema.json', url: 'https://raw.githubusercontent.com/ory/hydra/0b84568fffccf151dc5e6c7955fdfb738555bf4b/.schema/config.schema.json', sha256: '25742bde470a9e56ee851a5d8bff7f7466bd51bd9a4bcc6cd2647c990399af3c' },
  { file: 'ory/hydra-v26.2.0/spec__api.json', url: 'https://raw.githubusercontent.com/ory/hydra/0b84568fffccf151dc5e6c7955fdfb738555bf4b/spec/api.json', sha256: 'aa95a73bb14a90b8f2ce1f852cc41418cdbef3ac3bdedc09a48df0bc97a40540' },
  { file: 'ory/kratos-v26.2.0/embedx__config.schema.json', url: 'https://raw.githubusercontent.com/ory/kratos/9d7085948039ffb8960160d4979f71527b5cf4d5/embedx/config.schema.json', sha256: '11cc5bc641491b27ce95cd94570806827e189345f947ac59386850c1fa323d3d' },
  { file: 'ory/kratos-v26.2.0/embedx__identity_extension.schema.json', url: 'https://raw.githubusercontent.com/ory/kratos/9d7085948039ffb8960160d4979f71527b5cf4d5/embedx/identity_extension.schema.json', sha256: '7cdd6013061de9320ce83bd6c3c3603640a0f87150e480c7168fab1cfade156a' },
  { file: 'ory/kratos-v26.2.0/embedx__identity_meta.schema.json', url: 'https://raw.githubusercontent.com/ory/kratos/9d7085948039ffb8960160d4979f71527b5cf4d5/embedx/identity_meta.schema.json', sha256: 'fdbb512fd7e13daf5487a2e868198f83e24c326b5a1f24b97e3ae04ac4a8c9bf' },
  { file: 'ory/kratos-v26.2.0/oryx__otelx__config.schema.json', url: 'https://raw.githubusercontent.com/ory/kratos/9d7085948039ffb8960160d4979f71527b5cf4d5/oryx/otelx/config.schema.json', sha256: '2e6b4567e1d11f3bc4324339d611ddacf6305f63089e7bf6859c61bc5b05d5d1' },
  { file: 'ory/kratos-v26.2.0/schemastore__config.schema.json', url: 'https://raw.githubusercontent.com/ory/kratos/9d7085948039ffb8960160d4979f71527b5cf4d5/.schemastore/config.schema.json', sha256: '4d231bac94e287c32ed8d2ed1b84b7acfc77013cf506e75a9c6d5f759e2e5e0b' },
  { file: 'ory/kratos-v26.2.0/spec__api.json', url: 'https://raw.githubusercontent.com/ory/kratos/9d7085948039ffb8960160d4979f71527b5cf4d5/spec/api.json', sha256: 'f258cd011bfd9fc6c7589e60db992245fa1bb00dfc731b20bee9924b83855cc7' },
];

const REPOSITORY_ROOT = fileURLToPath(new URL('../../', import.meta.url));
/** The git-ignored cache that `npm run contracts` fills. */
export const CONTRACTS_CACHE_DIR = join(REPOSITORY_ROOT, '.cache', 'contracts');
const WORKSPACE_VENDOR_DIR = resolve(REPOSITORY_ROOT, '..', 'shared', 'vendor');

/** One line for a skipped test or a failing CLI: what is missing and how to get it. */
export const CONTRACTS_HINT =
  'the upstream Ory/GeoServer contracts were not found: set CONTRACTS_DIR to a copy, or run `npm run contracts` (downloads the pinned files)';

export type ContractsLocation = { ok: true; dir: string } | { ok: false; reason: string };

function isComplete(dir: string): boolean {
  return PINNED_CONTRACTS.every((contract) => existsSync(join(dir, contract.file)));
}

/** A contracts folder whose files differ from their pins. */
export class ContractMismatchError extends Error {
  override readonly name = 'ContractMismatchError';
}

/** The sha256 of bytes against a pin: undefined when they match, otherwise the hash that was found. */
export function pinnedHashMismatch(contract: PinnedContract, bytes: Buffer): string | undefined {
  const actual = createHash('sha256').update(bytes).digest('hex');
  return actual === contract.sha256 ? undefined : actual;
}

/** The sha256 of a file against its pin: undefined when it matches, otherwise what was found. */
export function checkPinnedHash(contract: PinnedContract, dir: string): string | undefined {
  return pinnedHashMismatch(contract, readFileSync(join(dir, contract.file)));
}

/** What a folder's files were when they last matched their pins (size and mtime each), by folder. */
const verified = new Map<string, string>();

function fingerprint(dir: string, contracts: readonly PinnedContract[]): string {
  return contracts
    .map((contract) => {
      const stat = statSync(join(dir, contract.file));
      return `${stat.size}:${stat.mtimeMs}`;
    })
    .join(',');
}

/**
 * Every pinned file in `dir` against its sha256; throws a ContractMismatchError naming each file that
 * differs, with the pinned and the found hash. Hashing the ~1 MB again is skipped while no file's size
 * or mtime changed since it last matched (the doubles look their contract up at every start).
 */
export function verifyContracts(dir: string, contracts: readonly PinnedContract[] = PINNED_CONTRACTS): void {
  const key = `${resolve(dir)}\0${contracts.map((contract) => contract.file).join(',')}`;
  const before = fingerprint(dir, contracts);
  if (verified.get(key) === before) return;
  const mismatches = contracts.flatMap((contract) => {
    const actual = checkPinnedHash(contract, dir);
    return actual === undefined ? [] : [`${join(dir, contract.file)}: sha256 ${actual}, pinned ${contract.sha256}`];
  });
  if (mismatches.length > 0) {
    verified.delete(key);
    throw new ContractMismatchError(
      `the contracts in ${dir} differ from their pins (services/shared/contracts.ts), refused: ${mismatches.join('; ')}. ` +
        'Replace the copy (`npm run contracts` fetches the pinned files) or point CONTRACTS_DIR at a good one.',
    );
  }
  verified.set(key, before);
}

/**
 * The first complete contracts folder, in the order CONTRACTS_DIR → cache → ../shared/vendor, checked
 * against the pins: `ok: false` when none is complete (tests skip and say why), a ContractMismatchError
 * when the one found was changed (tests fail: a changed contract is no reason to skip).
 */
export function locateContracts(env: NodeJS.ProcessEnv = process.env): ContractsLocation {
  const candidates = [env.CONTRACTS_DIR, CONTRACTS_CACHE_DIR, WORKSPACE_VENDOR_DIR].filter((dir): dir is string => Boolean(dir));
  for (const dir of candidates) {
    if (!isComplete(dir)) continue;
    verifyContracts(dir);
    return { ok: true, dir };
  }
  if (env.CONTRACTS_DIR) return { ok: false, reason: `CONTRACTS_DIR=${env.CONTRACTS_DIR} lacks some pinned files; ${CONTRACTS_HINT}` };
  return { ok: false, reason: CONTRACTS_HINT };
}

export class ContractsMissingError extends Error {
  override readonly name = 'ContractsMissingError';
}

/**
 * The absolute path of one pinned contract file in the folder locateContracts found (and checked);
 * throws a ContractsMissingError naming the remedy, or a ContractMismatchError for a changed copy.
 */
export function contractPath(file: string, env: NodeJS.ProcessEnv = process.env): string {
  if (!PINNED_CONTRACTS.some((contract) => contract.file === file)) throw new Error(`${file} is not a pinned contract`);
  const location = locateContracts(env);
  if (!location.ok) throw new ContractsMissingError(location.reason);
  return join(location.dir, file);
}
