// @ts-check
/**
 * Compiled JavaScript for `npm start`, so no process of it transpiles TypeScript at run time.
 *
 * `compiled('services/api/src/server.ts')` returns the path of an ESM bundle of that entry under
 * `.cache/start/` (git-ignored), built with esbuild the first time and again whenever any file it
 * was built from changed: next to each bundle, a manifest records the SHA-256 of every source file
 * that went into it, and checking those is all a start with unchanged sources does (about 10 ms).
 *
 * What makes a bundle behave exactly as its sources under tsx:
 * - npm packages stay external, loaded from node_modules as before;
 * - `import.meta.url` in each of our modules is replaced by that module's own source URL, so code
 *   that finds its data relative to itself (migrations, config files, swagger-ui) finds it where it is;
 * - dynamic `import()`s stay lazy (code splitting), so a module that installs its signal handlers
 *   before importing the rest (services/api/src/server.ts) still does so first.
 *
 * This file is plain JavaScript because it is what runs before anything could compile TypeScript.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cacheRoot = join(repoRoot, '.cache/start');

/** @param {string} path */
function digest(path) {
  return createHash('sha256').update(readFileSync(path)).digest('hex');
}

/**
 * @typedef {{ entry: string; inputs: Record<string, string> }} Manifest
 * @param {string} file
 * @returns {Manifest | undefined}
 */
function readManifest(file) {
  try {
    return JSON.parse(readFileSync(file, 'utf8'));
  } catch {
    return undefined;
  }
}

/** @param {Manifest} manifest */
function isCurrent(manifest) {
  for (const [path, sum] of Object.entries(manifest.inputs)) {
    const absolute = join(repoRoot, path);
    if (!existsSync(absolute) || digest(absolute) !== sum) return false;
  }
  return true;
}

// Spelt so that this file, bundled into scripts/start.ts, does not rewrite its own search string.
const META_URL = ['import', 'meta', 'url'].join('.');

/** @type {import('esbuild').Plugin} */
const keepModuleUrls = {
  name: 'keep-module-urls',
  setup(build) {
    build.onLoad({ filter: /\.(ts|mts|mjs|js)$/ }, async (args) => {
      if (args.path.includes(`${'/'}node_modules${'/'}`)) return undefined;
      let contents = await readFile(args.path, 'utf8');
      if (contents.includes(META_URL)) contents = contents.replaceAll(META_URL, JSON.stringify(pathToFileURL(args.path).href));
      return { contents, loader: /\.m?ts$/.test(args.path) ? 'ts' : 'js' };
    });
  },
};

/**
 * The compiled form of `entry` (a path relative to the repository root), built if missing or stale.
 * `also` are further entries of the same program that run as modules of their own (worker threads):
 * each is bundled beside the entry as `<its file name>.mjs`, sharing the entry's chunks.
 * @param {string} entry
 * @param {string[]} [also]
 * @returns {Promise<string>} absolute path of the bundle's entry file
 */
export async function compiled(entry, also = []) {
  const name = [entry, ...also].map((path) => path.replace(/\.[cm]?ts$/, '').replaceAll(/[^A-Za-z0-9]+/g, '-')).join('+');
  const manifestFile = join(cacheRoot, `${name}.json`);
  const manifest = readManifest(manifestFile);
  if (manifest && existsSync(join(repoRoot, manifest.entry)) && isCurrent(manifest)) return join(repoRoot, manifest.entry);

  const { build } = await import('esbuild');
  // A fresh folder per build: a process still running the previous bundle keeps its files.
  const outdir = join(cacheRoot, `${name}-${Date.now().toString(36)}-${process.pid}`);
  const result = await build({
    absWorkingDir: repoRoot,
    entryPoints: { main: entry, ...Object.fromEntries(also.map((path) => [path.split('/').pop().replace(/\.[cm]?ts$/, ''), path])) },
    outdir,
    outExtension: { '.js': '.mjs' },
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    packages: 'external',
    sourcemap: 'linked',
    metafile: true,
    logLevel: 'silent',
    plugins: [keepModuleUrls],
  });
  /** @type {Manifest} */
  const next = {
    entry: relative(repoRoot, join(outdir, 'main.mjs')),
    inputs: Object.fromEntries(Object.keys(result.metafile.inputs).map((path) => [path, digest(join(repoRoot, path))])),
  };
  mkdirSync(cacheRoot, { recursive: true });
  writeFileSync(`${manifestFile}.${process.pid}`, JSON.stringify(next, null, 2));
  renameSync(`${manifestFile}.${process.pid}`, manifestFile);
  pruneOldBuilds(outdir);
  return join(repoRoot, next.entry);
}

/**
 * Earlier builds go once they are ten minutes old (a process started from one has long loaded all of
 * it by then: its lazy chunks load during its start): every build folder that no manifest names,
 * including those of an entry whose name changed (e.g. when it gained a worker-thread entry).
 * @param {string} keep
 */
function pruneOldBuilds(keep) {
  const tooOld = Date.now() - 10 * 60_000;
  const current = new Set([keep]);
  for (const entry of readdirSync(cacheRoot)) {
    if (!entry.endsWith('.json')) continue;
    const manifest = readManifest(join(cacheRoot, entry));
    if (manifest) current.add(dirname(join(repoRoot, manifest.entry)));
  }
  for (const entry of readdirSync(cacheRoot, { withFileTypes: true })) {
    const path = join(cacheRoot, entry.name);
    // Build folders only (`<name>-<time>-<pid>`), not e.g. the embedded database's cache.
    if (!entry.isDirectory() || current.has(path) || !/-[0-9a-z]+-\d+$/.test(entry.name)) continue;
    if (statSync(path).mtimeMs < tooOld) rmSync(path, { recursive: true, force: true });
  }
}
