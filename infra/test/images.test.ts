import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copiedFiles, imageContentHash, isPinnedImage, projectImageName } from '../images.js';

/** A project image's reference follows its content: the files its Dockerfile copies from the context. */

let repo: string;
const DOCKERFILE = [
  'FROM node:20 AS deps',
  'COPY package.json package-lock.json ./',
  'FROM node:20',
  'COPY --from=deps /app/node_modules ./node_modules',
  'COPY services/shared ./services/shared',
  'COPY identity \\',
  '  ./identity',
  'CMD ["node", "identity/app.js"]',
].join('\n');

beforeAll(() => {
  repo = mkdtempSync(join(tmpdir(), 'image-hash-'));
  mkdirSync(join(repo, 'infra/docker'), { recursive: true });
  mkdirSync(join(repo, 'services/shared'), { recursive: true });
  mkdirSync(join(repo, 'services/api'), { recursive: true });
  mkdirSync(join(repo, 'identity/node_modules/x'), { recursive: true });
  writeFileSync(join(repo, 'infra/docker/identity.Dockerfile'), DOCKERFILE);
  writeFileSync(join(repo, 'package.json'), '{}');
  writeFileSync(join(repo, 'package-lock.json'), '{}');
  writeFileSync(join(repo, 'services/shared/errors.ts'), 'export const a = 1;');
  writeFileSync(join(repo, 'services/api/server.ts'), 'export const b = 1;');
  writeFileSync(join(repo, 'identity/app.ts'), 'export const c = 1;');
  writeFileSync(join(repo, 'identity/node_modules/x/index.js'), '');
  writeFileSync(join(repo, 'identity/app.test.ts'), 'export const t = 1;');
  mkdirSync(join(repo, 'identity/testing'), { recursive: true });
  writeFileSync(join(repo, 'identity/testing/double.ts'), 'export const d = 1;');
  // The same rules as the repository's own .dockerignore for these paths.
  writeFileSync(join(repo, '.dockerignore'), ['**/node_modules', '**/*.test.ts', '**/testing', ''].join('\n'));
});
afterAll(() => rmSync(repo, { recursive: true, force: true }));

const hash = () => imageContentHash(repo, 'infra/docker/identity.Dockerfile');

describe('the content hash of a project image', () => {
  it('covers exactly the files the COPY lines take from the context (not other stages, not .dockerignored ones)', () => {
    expect(copiedFiles(repo, DOCKERFILE)).toEqual(['identity/app.ts', 'package-lock.json', 'package.json', 'services/shared/errors.ts']);
  });

  it('changes when a copied file changes, and the image name with it', () => {
    const before = hash();
    const nameBefore = projectImageName(repo, 'geodata', 'login', '0.1.0');
    writeFileSync(join(repo, 'identity/app.ts'), 'export const c = 2;');
    expect(hash()).not.toBe(before);
    const nameAfter = projectImageName(repo, 'geodata', 'login', '0.1.0');
    expect(nameAfter).not.toBe(nameBefore);
    expect(nameAfter).toMatch(/^geodata\/login:0\.1\.0-[0-9a-f]{12}$/);
    expect(isPinnedImage(nameAfter)).toBe(true);
  });

  it('changes when the Dockerfile changes', () => {
    const before = hash();
    writeFileSync(join(repo, 'infra/docker/identity.Dockerfile'), `${DOCKERFILE}\nENV X=1`);
    expect(hash()).not.toBe(before);
  });

  it('stays the same when a .dockerignored file inside a copied folder changes, and changes with a copied file beside it', () => {
    const before = projectImageName(repo, 'geodata', 'login', '0.1.0');
    writeFileSync(join(repo, 'identity/app.test.ts'), 'export const t = 2;');
    writeFileSync(join(repo, 'identity/testing/double.ts'), 'export const d = 2;');
    writeFileSync(join(repo, 'identity/node_modules/x/index.js'), 'module.exports = 2;');
    expect(projectImageName(repo, 'geodata', 'login', '0.1.0')).toBe(before);
    writeFileSync(join(repo, 'identity/app.ts'), 'export const c = 3;');
    expect(projectImageName(repo, 'geodata', 'login', '0.1.0')).not.toBe(before);
  });

  it('stays the same when a file no COPY line takes changes (nothing restarts for nothing)', () => {
    const before = hash();
    writeFileSync(join(repo, 'services/api/server.ts'), 'export const b = 2;');
    expect(hash()).toBe(before);
  });
});
