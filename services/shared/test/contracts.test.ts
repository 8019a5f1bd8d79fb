import { createHash } from 'node:crypto';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { lacks, requirements } from '../../../test/helpers/requirements.js';
import { ContractMismatchError, contractPath, locateContracts, PINNED_CONTRACTS, verifyContracts, type PinnedContract } from '../contracts.js';

const sha256 = (bytes: Buffer | string): string => createHash('sha256').update(bytes).digest('hex');

/** Flip the first byte of a file, keeping its size (the change a hash exists to notice). */
function changeOneByte(file: string): { before: string; after: string } {
  const bytes = readFileSync(file);
  const before = sha256(bytes);
  bytes[0] = bytes[0]! ^ 0x01;
  writeFileSync(file, bytes);
  // Another second than the first check saw, as a copy or an editor leaves it (no coarse clock can hide it).
  const later = new Date(Date.now() + 2_000);
  utimesSync(file, later, later);
  return { before, after: sha256(bytes) };
}

const scratch: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'contracts-'));
  scratch.push(dir);
  return dir;
}
afterEach(() => {
  for (const dir of scratch.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('a contracts folder checked against its pins', () => {
  const pin: PinnedContract = { file: 'upstream/spec.json', url: 'https://example.org/spec.json', sha256: sha256('{"openapi":"3.0.3"}\n') };

  function folderWithPin(): string {
    const dir = tempDir();
    mkdirSync(join(dir, 'upstream'));
    writeFileSync(join(dir, pin.file), '{"openapi":"3.0.3"}\n');
    return dir;
  }

  it('accepts a file whose sha256 is the pinned one', () => {
    expect(() => verifyContracts(folderWithPin(), [pin])).not.toThrow();
  });

  it('refuses a file with one byte changed, naming the file and both hashes', () => {
    const dir = folderWithPin();
    const { after } = changeOneByte(join(dir, pin.file));
    expect(() => verifyContracts(dir, [pin])).toThrow(ContractMismatchError);
    expect(() => verifyContracts(dir, [pin])).toThrow(`${join(dir, pin.file)}: sha256 ${after}, pinned ${pin.sha256}`);
  });

  it('refuses a file changed after it once matched', () => {
    const dir = folderWithPin();
    verifyContracts(dir, [pin]);
    changeOneByte(join(dir, pin.file));
    expect(() => verifyContracts(dir, [pin])).toThrow(ContractMismatchError);
  });
});

const MISSING = lacks('the tampered-copy tests of the vendored contracts', requirements.contracts());

describe.skipIf(MISSING)('the vendored contracts, wherever they are found', () => {
  /** A copy of the pinned files of the folder the suite uses, as CONTRACTS_DIR would name it. */
  function copyOfContracts(): string {
    const location = locateContracts();
    if (!location.ok) throw new Error(location.reason);
    const dir = tempDir();
    for (const contract of PINNED_CONTRACTS) {
      mkdirSync(dirname(join(dir, contract.file)), { recursive: true });
      cpSync(join(location.dir, contract.file), join(dir, contract.file));
    }
    return dir;
  }

  it('an unchanged copy in CONTRACTS_DIR is used', () => {
    const dir = copyOfContracts();
    expect(locateContracts({ CONTRACTS_DIR: dir })).toEqual({ ok: true, dir });
    expect(contractPath('ory/kratos-v26.2.0/spec__api.json', { CONTRACTS_DIR: dir })).toBe(join(dir, 'ory/kratos-v26.2.0/spec__api.json'));
  });

  it('a copy with one byte changed is refused by every loader, naming the file and both hashes', () => {
    const dir = copyOfContracts();
    const file = 'ory/kratos-v26.2.0/spec__api.json';
    const pinned = PINNED_CONTRACTS.find((contract) => contract.file === file)!.sha256;
    const { before, after } = changeOneByte(join(dir, file));
    expect(before).toBe(pinned);
    const refusal = `${join(dir, file)}: sha256 ${after}, pinned ${pinned}`;
    // locateContracts: the tests' requirement and the rehearsal; contractPath: the doubles, the config check, the GeoServer spec.
    expect(() => locateContracts({ CONTRACTS_DIR: dir })).toThrow(refusal);
    expect(() => contractPath('ory/hydra-v26.2.0/spec__api.json', { CONTRACTS_DIR: dir })).toThrow(ContractMismatchError);
    expect(() => contractPath(file, { CONTRACTS_DIR: dir })).toThrow(refusal);
  });
});
