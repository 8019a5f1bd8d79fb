import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { webBuildIsCurrent } from '../launch.js';

/** A site folder laid out like services/web, with file times set explicitly (no sleeping). */
const root = mkdtempSync(join(tmpdir(), 'web-launch-'));
const shared = join(root, 'shared');
const at = (path: string, seconds: number) => utimesSync(path, seconds, seconds);
function write(path: string, seconds: number): void {
  mkdirSync(join(path, '..'), { recursive: true });
  writeFileSync(path, 'x');
  at(path, seconds);
}
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('deciding whether the web app must be built before it starts', () => {
  write(join(root, 'src/pages/index.astro'), 1000);
  write(join(root, 'public/favicon.svg'), 1000);
  write(join(root, 'astro.config.mjs'), 1000);
  write(join(shared, 'schema.ts'), 1000);
  for (const dir of ['src/pages', 'src', 'public', 'shared']) at(join(root, dir), 1000);

  it('does not take a build in progress (entry written, not yet complete) for a current build', () => {
    write(join(root, 'dist/server/entry.mjs'), 2000);
    expect(webBuildIsCurrent(root, shared)).toBe(false);
  });

  it('takes a completed build newer than every source as current', () => {
    write(join(root, 'dist/.build-complete'), 2001);
    expect(webBuildIsCurrent(root, shared)).toBe(true);
  });

  it('builds again when a source or services/shared changed after the build', () => {
    at(join(root, 'src/pages/index.astro'), 3000);
    expect(webBuildIsCurrent(root, shared)).toBe(false);
    at(join(root, 'src/pages/index.astro'), 1000);
    at(join(shared, 'schema.ts'), 3000);
    expect(webBuildIsCurrent(root, shared)).toBe(false);
  });
});
