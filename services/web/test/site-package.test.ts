/**
 * The site is a package of its own (services/web/package.json + package-lock.json): a deploy installs
 * only that, in the site's folder, with nothing above it. These checks keep that true as the code
 * grows: every package the site's code imports (also through services/shared) is one of its
 * dependencies, the shared code's packages resolve from the site (astro.config.mjs, resolve.dedupe),
 * the lockfile matches package.json (npm ci refuses otherwise), and the versions are the ones the
 * repository root installs for development and the browser tests, so what is tested is what deploys.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { sharedDependencies } from '../astro.config.mjs';

interface PackageJson {
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
  overrides?: Record<string, string>;
}
interface Lockfile {
  packages: Record<string, { version?: string; dependencies?: Record<string, string> }>;
}

const webRoot = join(dirname(fileURLToPath(import.meta.url)), '..');
const repoRoot = join(webRoot, '../..');
const sharedRoot = join(repoRoot, 'services/shared');
const readJson = <T>(path: string): T => JSON.parse(readFileSync(path, 'utf8')) as T;
const site = readJson<PackageJson>(join(webRoot, 'package.json'));
const siteLock = readJson<Lockfile>(join(webRoot, 'package-lock.json'));
const rootPackage = readJson<PackageJson>(join(repoRoot, 'package.json'));
const rootLock = readJson<Lockfile>(join(repoRoot, 'package-lock.json'));

// Static imports and re-exports (at the start of a line, possibly over several lines) and import(…).
const SPECIFIER = /^\s*(?:import|export)\s+(?:[^'";]*?\sfrom\s*)?['"]([^'"\n]+)['"]|\bimport\(\s*['"]([^'"\n]+)['"]\s*\)/gm;
const packageOf = (specifier: string) => specifier.split('/').slice(0, specifier.startsWith('@') ? 2 : 1).join('/');
const isBuiltin = (specifier: string) => specifier.startsWith('node:') || builtinModules.includes(packageOf(specifier));

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'content' ? [] : sourceFiles(path);
    return /\.(ts|astro|mjs)$/.test(entry.name) ? [path] : [];
  });
}

/** Bare imports of the site's code and of every services/shared file it reaches, by importing file. */
function importsOfTheSite(): { bare: Map<string, Set<string>>; outside: string[] } {
  const bare = new Map<string, Set<string>>();
  const outside: string[] = [];
  const seen = new Set<string>();
  const queue = [...sourceFiles(join(webRoot, 'src')), join(webRoot, 'astro.config.mjs')];
  while (queue.length > 0) {
    const file = queue.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    for (const [, staticSpecifier, dynamicSpecifier] of readFileSync(file, 'utf8').matchAll(SPECIFIER)) {
      const specifier = staticSpecifier ?? dynamicSpecifier;
      if (!specifier) continue;
      if (specifier.startsWith('.')) {
        const target = resolve(dirname(file), specifier).replace(/\.js$/, '.ts');
        if (target.startsWith(sharedRoot)) queue.push(target);
        else if (!target.startsWith(webRoot)) outside.push(`${relative(repoRoot, file)} → ${specifier}`);
      } else if (!specifier.startsWith('astro:') && !isBuiltin(specifier)) {
        const set = bare.get(packageOf(specifier)) ?? new Set<string>();
        set.add(relative(repoRoot, file));
        bare.set(packageOf(specifier), set);
      }
    }
  }
  return { bare, outside };
}

describe('the site’s own package', () => {
  const { bare, outside } = importsOfTheSite();

  it('lists every package its code imports, also those imported through services/shared', () => {
    const missing = [...bare.keys()].filter((name) => !site.dependencies?.[name]);
    expect(missing, `imported but not in services/web/package.json: ${missing.map((m) => `${m} (${[...bare.get(m)!].join(', ')})`).join('; ')}`).toEqual([]);
    const unused = Object.keys(site.dependencies ?? {}).filter((name) => !bare.has(name));
    expect(unused, 'dependencies of the site that nothing of it imports').toEqual([]);
  });

  it('imports no other package’s code than services/shared', () => {
    expect(outside).toEqual([]);
  });

  it('resolves the packages services/shared imports from the site’s node_modules (resolve.dedupe)', () => {
    const sharedImports = [...bare].filter(([, files]) => [...files].some((f) => f.startsWith('services/shared/'))).map(([name]) => name);
    expect(sharedImports.length).toBeGreaterThan(0);
    expect(sharedImports.filter((name) => !sharedDependencies.includes(name))).toEqual([]);
  });

  it('has a lockfile that matches package.json, so npm ci installs it', () => {
    expect(siteLock.packages['']?.dependencies).toEqual(site.dependencies);
    for (const [name, version] of Object.entries(site.dependencies ?? {})) expect(siteLock.packages[`node_modules/${name}`]?.version, name).toBe(version);
  });

  it('pins the versions the repository root installs for development and tests', () => {
    const rootVersions = { ...rootPackage.dependencies, ...rootPackage.devDependencies };
    for (const [name, version] of Object.entries(site.dependencies ?? {})) {
      expect(version, `${name} is pinned exactly`).toMatch(/^\d+\.\d+\.\d+$/);
      expect(rootVersions[name] ?? rootLock.packages[`node_modules/${name}`]?.version, `${name} in the root package`).toBe(version);
    }
    expect(site.overrides).toEqual(rootPackage.overrides);
  });
});
