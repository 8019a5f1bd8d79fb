/**
 * A project image's file set without Docker: reads an `infra/docker/*.Dockerfile` and carries out its
 * stages in a temporary folder, each stage a folder standing for its root file system.
 *
 * What it does, instruction by instruction (anything else fails the assembly, so a new kind of step
 * cannot be skipped silently):
 *   ARG/FROM     a new stage: empty for a base image, a copy of the named stage otherwise;
 *   WORKDIR      the stage's working directory;
 *   COPY         from the build context (the repository, filtered by .dockerignore exactly as Docker
 *                filters it) or `--from=<stage>`; `--chmod` is applied;
 *   RUN npm ci   the locked dependency tree (the checkout's node_modules, checked against the lock);
 *   RUN npm prune --omit=dev   only the packages the lock does not mark `dev`, copied out of that tree;
 *   RUN node …   run for real in the stage folder (the build step);
 *   RUN mkdir -p /x && chown …, RUN apt-get …   system changes: the directories are created, the
 *                Debian packages are recorded (the host's own git/curl stand in for them);
 *   ENV, USER, CMD, HEALTHCHECK, EXPOSE   recorded.
 * The final stage's folder is then what the image holds: its WORKDIR has nothing from the checkout
 * that the Dockerfile did not copy, and its node_modules only production packages.
 */
import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  cpSync,
  existsSync,
  linkSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  symlinkSync,
} from 'node:fs';
import { basename, dirname, join, posix, relative } from 'node:path';

export interface Instruction {
  keyword: string;
  args: string;
}

export interface AssembledImage {
  dockerfile: string;
  /** The final stage's root file system. */
  root: string;
  /** WORKDIR inside the image (e.g. /app). */
  workdir: string;
  /** The host folder standing for WORKDIR. */
  hostWorkdir: string;
  env: Record<string, string>;
  cmd: string[];
  user: string | undefined;
  healthcheck: string[] | 'NONE' | undefined;
  /** Debian packages the image installs (not installed by the assembly; the host's must stand in). */
  aptPackages: string[];
  /**
   * Owners the Dockerfile gives directories (`RUN mkdir -p … && chown user:group …`), by path in the
   * image. The assembly creates the directories as the assembling user; a new named volume mounted
   * there takes this owner under Docker, which the rehearsal repeats.
   */
  owners: Record<string, string>;
  /** The host path of a path inside the image. */
  hostPath(containerPath: string): string;
}

/** Instructions with line continuations joined and comments dropped. */
export function instructions(text: string): Instruction[] {
  return text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith('#'))
    .map((line) => {
      const space = line.search(/\s/);
      return { keyword: line.slice(0, space < 0 ? undefined : space).toUpperCase(), args: space < 0 ? '' : line.slice(space + 1).trim() };
    });
}

/** The instructions of the last stage (from its FROM). */
export function finalStage(text: string): Instruction[] {
  const all = instructions(text);
  return all.slice(all.map((i) => i.keyword).lastIndexOf('FROM'));
}

/** KEY=value pairs of ENV or ARG (double quotes allowed; the legacy `ENV KEY value` form too). */
export function parsePairs(args: string): Record<string, string> {
  const out: Record<string, string> = {};
  const pattern = /([A-Za-z_][A-Za-z0-9_]*)=("((?:[^"\\]|\\.)*)"|\S*)/g;
  if (!args.includes('=')) {
    const [key, ...rest] = args.split(/\s+/);
    if (key) out[key] = rest.join(' ');
    return out;
  }
  for (const match of args.matchAll(pattern)) out[match[1]!] = match[3] !== undefined ? match[3].replace(/\\(.)/g, '$1') : match[2]!;
  return out;
}

// ------------------------------------------------------------------ .dockerignore

interface IgnoreRule {
  pattern: RegExp;
  negate: boolean;
}

/** Docker's .dockerignore: Go filepath.Match patterns plus `**`, anchored at the context root; last match wins. */
export function dockerignore(text: string): (relativePath: string) => boolean {
  const rules: IgnoreRule[] = text
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith('#'))
    .map((line) => {
      const negate = line.startsWith('!');
      const cleaned = posix.normalize((negate ? line.slice(1) : line).trim()).replace(/^\/+/, '').replace(/\/+$/, '');
      return { pattern: globToRegExp(cleaned), negate };
    });
  return (relativePath) => {
    // A path is excluded when it or any folder above it matches (Docker does not descend into it).
    const parts = relativePath.split('/');
    let ignored = false;
    for (let i = 1; i <= parts.length; i++) {
      const prefix = parts.slice(0, i).join('/');
      for (const rule of rules) if (rule.pattern.test(prefix)) ignored = !rule.negate;
      if (ignored) return true;
    }
    return ignored;
  };
}

function globToRegExp(glob: string): RegExp {
  let out = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === '*' && glob[i + 1] === '*') {
      // `**/` matches any number of folders, including none.
      if (glob[i + 2] === '/') {
        out += '(?:.*/)?';
        i += 2;
      } else {
        out += '.*';
        i += 1;
      }
    } else if (c === '*') out += '[^/]*';
    else if (c === '?') out += '[^/]';
    else out += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${out}$`);
}

// ------------------------------------------------------------------ dependency trees

interface LockPackage {
  version?: string;
  dev?: boolean;
  optional?: boolean;
  devOptional?: boolean;
  link?: boolean;
}

function lockPackages(lockFile: string): [string, LockPackage][] {
  const lock = JSON.parse(readFileSync(lockFile, 'utf8')) as { packages: Record<string, LockPackage> };
  return Object.entries(lock.packages).filter(([path]) => path.startsWith('node_modules/'));
}

/** The checkout's node_modules must be the locked tree (what `npm ci` installs), or the copy proves nothing. */
function checkInstalledTree(repoRoot: string, lockFile: string): void {
  const mismatches: string[] = [];
  for (const [path, pkg] of lockPackages(lockFile)) {
    const manifest = join(repoRoot, path, 'package.json');
    if (!existsSync(manifest)) {
      // Optional packages for other platforms (e.g. @esbuild/darwin-arm64) are not installed here, as in the image.
      if (!pkg.optional && !pkg.devOptional) mismatches.push(`${path} missing`);
      continue;
    }
    const installed = (JSON.parse(readFileSync(manifest, 'utf8')) as { version?: string }).version;
    // npm writes the lock's version normalised (a manifest's `v26.2.0` is locked as 26.2.0).
    if (pkg.version && installed?.replace(/^v/, '') !== pkg.version) mismatches.push(`${path} ${installed ?? '?'} ≠ locked ${pkg.version}`);
  }
  if (mismatches.length) throw new Error(`node_modules is not the locked tree (run npm ci): ${mismatches.slice(0, 5).join('; ')}`);
}

/** Hard-links a folder's files (a copy that costs no space), leaving out `skip` names at its top. */
function linkTree(from: string, to: string, skip: ReadonlySet<string> = new Set()): void {
  mkdirSync(to, { recursive: true });
  for (const entry of readdirSync(from, { withFileTypes: true })) {
    if (skip.has(entry.name)) continue;
    const source = join(from, entry.name);
    const target = join(to, entry.name);
    if (entry.isSymbolicLink()) symlinkSync(readlinkSync(source), target);
    else if (entry.isDirectory()) linkTree(source, target);
    else {
      try {
        linkSync(source, target);
      } catch {
        cpSync(source, target);
      }
    }
  }
}

/** `npm prune --omit=dev` on the locked tree: every package the lock does not mark dev-only. */
function productionTree(repoRoot: string, lockFile: string, into: string): void {
  for (const [path, pkg] of lockPackages(lockFile)) {
    // npm omits a package when it is dev-only; devOptional ones stay when only dev is omitted.
    if (pkg.dev) continue;
    const source = join(repoRoot, path);
    if (!existsSync(source)) {
      if (pkg.optional) continue;
      throw new Error(`${path} is a production dependency but not installed (run npm ci)`);
    }
    // Nested node_modules are separate lock entries, copied (or left out) on their own.
    linkTree(source, join(into, path), new Set(['node_modules']));
  }
  const bin = join(into, 'node_modules', '.bin');
  mkdirSync(bin, { recursive: true });
}

// ------------------------------------------------------------------ the stages

interface Stage {
  name: string;
  root: string;
  workdir: string;
  env: Record<string, string>;
  owners: Record<string, string>;
}

function splitWords(args: string): string[] {
  return args.split(/\s+/).filter(Boolean);
}

function parseExecForm(args: string): string[] {
  const parsed = JSON.parse(args) as unknown;
  if (!Array.isArray(parsed) || !parsed.every((a) => typeof a === 'string')) throw new Error(`not an exec-form array: ${args}`);
  return parsed;
}

/**
 * Carries out the Dockerfile into `into` (which must be empty or absent). `repoRoot` is the build
 * context. Throws on an instruction it cannot carry out faithfully.
 */
export function assembleImage(dockerfile: string, options: { repoRoot: string; into: string }): AssembledImage {
  const { repoRoot, into } = options;
  const text = readFileSync(dockerfile, 'utf8');
  const ignored = dockerignore(existsSync(join(repoRoot, '.dockerignore')) ? readFileSync(join(repoRoot, '.dockerignore'), 'utf8') : '');
  const lockFile = join(repoRoot, 'package-lock.json');
  const args: Record<string, string> = {};
  const stages = new Map<string, Stage>();
  let stage: Stage | undefined;
  let cmd: string[] = [];
  let user: string | undefined;
  let healthcheck: AssembledImage['healthcheck'];
  const aptPackages: string[] = [];
  const expand = (value: string) => value.replace(/\$\{(\w+)\}|\$(\w+)/g, (_, a: string | undefined, b: string | undefined) => args[(a ?? b)!] ?? stage?.env[(a ?? b)!] ?? '');
  const host = (s: Stage, containerPath: string) => join(s.root, posix.resolve(s.workdir, containerPath));
  const current = (): Stage => {
    if (!stage) throw new Error(`${basename(dockerfile)}: instruction before FROM`);
    return stage;
  };

  mkdirSync(into, { recursive: true });
  for (const { keyword, args: raw } of instructions(text)) {
    switch (keyword) {
      case 'ARG': {
        for (const [k, v] of Object.entries(parsePairs(raw))) args[k] ??= v;
        break;
      }
      case 'FROM': {
        const [image, as, name] = splitWords(expand(raw));
        if (!image) throw new Error(`${basename(dockerfile)}: FROM without an image`);
        const stageName = as?.toUpperCase() === 'AS' && name ? name : `stage-${stages.size}`;
        const root = join(into, stageName);
        const parent = stages.get(image);
        if (parent) cpSync(parent.root, root, { recursive: true, verbatimSymlinks: true });
        else mkdirSync(root, { recursive: true });
        stage = { name: stageName, root, workdir: parent?.workdir ?? '/', env: { ...(parent?.env ?? {}) }, owners: { ...(parent?.owners ?? {}) } };
        stages.set(stageName, stage);
        cmd = [];
        user = undefined;
        healthcheck = undefined;
        break;
      }
      case 'WORKDIR': {
        const s = current();
        s.workdir = posix.resolve(s.workdir, expand(raw));
        mkdirSync(host(s, '.'), { recursive: true });
        break;
      }
      case 'ENV': {
        Object.assign(current().env, parsePairs(raw));
        break;
      }
      case 'COPY': {
        const s = current();
        const words = splitWords(raw);
        const flags = Object.fromEntries(words.filter((w) => w.startsWith('--')).map((w) => w.slice(2).split('=') as [string, string]));
        const paths = words.filter((w) => !w.startsWith('--'));
        const dest = paths.pop()!;
        const destIsDir = dest.endsWith('/') || dest === '.' || paths.length > 1;
        const destHost = host(s, dest);
        for (const source of paths) {
          let sourceHost: string;
          if (flags.from) {
            const from = stages.get(flags.from);
            if (!from) throw new Error(`${basename(dockerfile)}: COPY --from=${flags.from}: no such stage`);
            sourceHost = host(from, source);
          } else {
            const rel = posix.normalize(source).replace(/^\.\/?/, '');
            if (ignored(rel)) throw new Error(`${basename(dockerfile)}: COPY ${source}: excluded by .dockerignore`);
            sourceHost = join(repoRoot, rel);
          }
          if (!existsSync(sourceHost)) throw new Error(`${basename(dockerfile)}: COPY ${source}: not found`);
          const isDir = lstatSync(sourceHost).isDirectory();
          const target = isDir || !destIsDir ? destHost : join(destHost, basename(source));
          mkdirSync(isDir ? target : dirname(target), { recursive: true });
          if (flags.from) {
            if (isDir) linkTree(sourceHost, target);
            else cpSync(sourceHost, target, { verbatimSymlinks: true });
          } else {
            const base = relative(repoRoot, sourceHost);
            cpSync(sourceHost, target, {
              recursive: true,
              verbatimSymlinks: true,
              filter: (path) => !ignored(relative(repoRoot, path)) || relative(repoRoot, path) === base,
            });
          }
          if (flags.chmod) chmodSync(target, parseInt(flags.chmod, 8));
        }
        break;
      }
      case 'RUN': {
        const s = current();
        const command = expand(raw).replace(/\s+/g, ' ');
        if (/^npm ci\b/.test(command)) {
          if (!existsSync(host(s, 'package-lock.json'))) throw new Error(`${basename(dockerfile)}: npm ci without package-lock.json`);
          checkInstalledTree(repoRoot, lockFile);
          rmSync(host(s, 'node_modules'), { recursive: true, force: true });
          symlinkSync(join(repoRoot, 'node_modules'), host(s, 'node_modules'));
        } else if (/^npm prune --omit=dev\b/.test(command)) {
          rmSync(host(s, 'node_modules'), { recursive: true, force: true });
          productionTree(repoRoot, lockFile, host(s, '.'));
        } else if (/^node\s/.test(command)) {
          const [program, ...rest] = splitWords(command);
          const run = spawnSync(program === 'node' ? process.execPath : program!, rest, {
            cwd: host(s, '.'),
            env: { PATH: process.env.PATH ?? '', ...s.env },
            encoding: 'utf8',
          });
          if (run.status !== 0) throw new Error(`${basename(dockerfile)}: RUN ${command} failed (${run.status ?? run.signal}): ${run.stderr}`);
        } else if (/^apt-get update && apt-get install /.test(command)) {
          const install = /apt-get install ([^&]*)/.exec(command)![1]!;
          aptPackages.push(...splitWords(install).filter((w) => !w.startsWith('-')));
        } else if (/^mkdir -p /.test(command)) {
          const [mkdir, ...rest] = command.split('&&').map((part) => part.trim());
          if (rest.some((part) => !/^chown [\w:]+ [\s/\w-]+$/.test(part))) throw new Error(`${basename(dockerfile)}: RUN ${command}: only mkdir -p … && chown … is understood`);
          for (const dir of splitWords(mkdir!).slice(2)) mkdirSync(host(s, dir), { recursive: true });
          for (const part of rest) {
            const [, owner, ...dirs] = splitWords(part);
            for (const dir of dirs) s.owners[posix.resolve(s.workdir, dir)] = owner!;
          }
        } else {
          throw new Error(`${basename(dockerfile)}: RUN ${command}: the assembly does not know this step (see infra/docker/image.ts)`);
        }
        break;
      }
      case 'USER':
        user = raw;
        break;
      case 'CMD':
        cmd = parseExecForm(raw);
        break;
      case 'HEALTHCHECK':
        healthcheck = raw === 'NONE' ? 'NONE' : parseExecForm(raw.slice(raw.indexOf('CMD') + 3).trim());
        break;
      case 'EXPOSE':
      case 'LABEL':
        break;
      default:
        throw new Error(`${basename(dockerfile)}: ${keyword} is not supported by the assembly`);
    }
  }
  const last = current();
  const workdir = last.workdir;
  return {
    dockerfile,
    root: last.root,
    workdir,
    hostWorkdir: host(last, '.'),
    env: last.env,
    cmd,
    user,
    healthcheck,
    aptPackages,
    owners: last.owners,
    hostPath: (containerPath: string) => join(last.root, posix.resolve(workdir, containerPath)),
  };
}

/** Every file under a folder, relative to it (for the tests: what the image holds). */
export function filesUnder(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const entry of readdirSync(d, { withFileTypes: true })) {
      const path = join(d, entry.name);
      if (entry.isDirectory()) walk(path);
      else out.push(relative(dir, path));
    }
  };
  if (existsSync(dir) && statSync(dir).isDirectory()) walk(dir);
  return out.sort();
}
