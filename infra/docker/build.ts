/**
 * The build step of the project images: `node --import tsx infra/docker/build.ts --out dist <dir>…`.
 *
 * Every `.ts` file under the given directories becomes a `.js` file at the same relative path under
 * the output directory; every other file (SQL migrations, YAML, JSON schemas, `.mjs` helpers, shell
 * scripts) is copied as it is. One file in, one file out, no bundling: code that finds its data
 * relative to its own source (`new URL('../../migrations', import.meta.url)`, identity/config,
 * swagger-ui-dist through node_modules) finds it at the same place in the image as in the checkout.
 *
 * esbuild only strips types (the tsconfig has `verbatimModuleSyntax` and `isolatedModules`, so every
 * file compiles alone); `npm run typecheck` is where types are checked.
 * Exit codes: 0 built, 1 a file failed to compile, 2 usage.
 */
import { transform } from 'esbuild';
import { chmodSync, copyFileSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

export interface BuildReport {
  compiled: number;
  copied: number;
}

/** Tests, test helpers and test doubles never ship (the images' .dockerignore drops them too). */
function shipped(path: string): boolean {
  const parts = path.split('/');
  return !/\.test\.ts$/.test(path) && !['testing', 'test', 'node_modules'].some((dir) => parts.includes(dir));
}

function* walk(dir: string): Generator<string> {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* walk(path);
    else if (entry.isFile()) yield path;
  }
}

export async function buildTree(root: string, sources: string[], outDir: string): Promise<BuildReport> {
  const report: BuildReport = { compiled: 0, copied: 0 };
  for (const source of sources) {
    const absolute = join(root, source);
    const files = statSync(absolute).isDirectory() ? [...walk(absolute)] : [absolute];
    for (const file of files) {
      const rel = relative(root, file);
      if (!shipped(rel)) continue;
      if (file.endsWith('.ts') && !file.endsWith('.d.ts')) {
        const target = join(outDir, rel.replace(/\.ts$/, '.js'));
        const result = await transform(readFileSync(file, 'utf8'), {
          loader: 'ts',
          format: 'esm',
          platform: 'node',
          target: 'node20',
          sourcefile: rel,
        });
        mkdirSync(dirname(target), { recursive: true });
        writeFileSync(target, result.code);
        report.compiled++;
      } else {
        const target = join(outDir, rel);
        mkdirSync(dirname(target), { recursive: true });
        copyFileSync(file, target);
        chmodSync(target, statSync(file).mode & 0o777);
        report.copied++;
      }
    }
  }
  return report;
}

async function main(argv: string[]): Promise<number> {
  const outIndex = argv.indexOf('--out');
  const outDir = outIndex >= 0 ? argv[outIndex + 1] : undefined;
  const sources = argv.filter((_, i) => i !== outIndex && i !== outIndex + 1);
  if (!outDir || sources.length === 0) {
    console.error('usage: build.ts --out <dir> <source dir or file>…');
    return 2;
  }
  const report = await buildTree(process.cwd(), sources, resolve(outDir));
  console.log(`build: ${report.compiled} TypeScript files compiled, ${report.copied} files copied to ${outDir}`);
  return 0;
}

if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
}
