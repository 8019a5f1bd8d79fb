import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readSync, rmSync, statSync, unlinkSync } from 'node:fs';
import { runAsCommand } from '../sites/entry-point.js';
import { BRANCH, COMMIT, newJobId, spoolPaths, writeAtomically } from './spool.js';

/**
 * `build-submit`: the webhook container's DEPLOY_SCRIPT. It takes the deploy script's arguments
 * (scripts/deploy-branch.sh <branch> <deployDir> <port> <repoUrl> [<commit>], as the webhook's
 * launcher passes them), puts a request for <branch> and <commit> into <deployDir>, which in the
 * webhook container is the target's build spool (spool.ts), and waits for that target's builder:
 * the builder's log is copied to standard output (the webhook's deploy log), and the builder's exit
 * code becomes this one's, so the webhook sees exactly what the deploy script said.
 *
 * The port and the repository are not passed on: the builder has its own (a webhook cannot point a
 * target's builder at another repository). On SIGTERM or SIGINT (the webhook's deadline) the request is
 * cancelled and the builder stops the deploy, which puts the previous release back.
 *
 * Environment: BUILD_PICKUP_TIMEOUT_SECONDS (60): how long the builder may take to take the request
 * before it is withdrawn; BUILD_CANCEL_GRACE_SECONDS (60): how long to wait for a cancelled deploy.
 * Exit codes: the builder's (deploy-branch.sh's: 0 deployed … 9 refused), 1 the builder did not take
 * the request, 2 usage, 130/143 interrupted.
 */

const POLL_MS = 200;

function usage(message: string): never {
  console.error(`build-submit: ${message}`);
  console.error('usage: build-submit <branch> <spoolDir> <port> <repoUrl> [<commit>]');
  process.exit(2);
}

export interface SubmitOptions {
  spool: string;
  branch: string;
  commit?: string;
  pickupTimeoutMs: number;
  cancelGraceMs: number;
  /** Where the builder's log goes (standard output). */
  write(chunk: Buffer): void;
  /** Resolves when the caller wants the deploy stopped (a signal). */
  cancelled: Promise<number>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Submit one request and follow it to its exit code. */
export async function submit(options: SubmitOptions): Promise<number> {
  const paths = spoolPaths(options.spool);
  mkdirSync(paths.jobs, { recursive: true });
  const id = newJobId();
  writeAtomically(paths.request(id), `${JSON.stringify({ id, branch: options.branch, ...(options.commit ? { commit: options.commit } : {}) })}\n`);
  let offset = 0;
  const copyLog = () => {
    if (!existsSync(paths.log(id))) return;
    const fd = openSync(paths.log(id), 'r');
    try {
      const buffer = Buffer.alloc(64 * 1024);
      for (;;) {
        const read = readSync(fd, buffer, 0, buffer.length, offset);
        if (read <= 0) break;
        offset += read;
        options.write(buffer.subarray(0, read));
      }
    } finally {
      closeSync(fd);
    }
  };
  let interruptedWith: number | undefined;
  void options.cancelled.then((code) => {
    interruptedWith = code;
    try {
      writeAtomically(paths.cancel(id), 'cancel\n');
    } catch {
      // the spool is gone: nothing to cancel
    }
  });
  const submittedAt = Date.now();
  let cancelledAt: number | undefined;
  for (;;) {
    copyLog();
    if (existsSync(paths.exit(id))) {
      copyLog();
      const code = Number(readFileSync(paths.exit(id), 'utf8').trim());
      return interruptedWith ?? (Number.isInteger(code) ? code : 1);
    }
    if (interruptedWith !== undefined) {
      cancelledAt ??= Date.now();
      if (existsSync(paths.request(id))) {
        // Never taken: withdraw it, nothing ran.
        rmSync(paths.request(id), { force: true });
        return interruptedWith;
      }
      if (Date.now() - cancelledAt > options.cancelGraceMs) return interruptedWith;
    } else if (Date.now() - submittedAt > options.pickupTimeoutMs && existsSync(paths.request(id))) {
      try {
        unlinkSync(paths.request(id));
        options.write(Buffer.from(`build-submit: the builder did not take the request within ${options.pickupTimeoutMs / 1000} s; withdrawn\n`));
        return 1;
      } catch {
        // taken in the meantime: follow it
      }
    }
    await sleep(POLL_MS);
  }
}

async function main(argv: string[]): Promise<number> {
  if (argv.length !== 4 && argv.length !== 5) usage('expected 4 or 5 arguments');
  const [branch, spool, , , commit] = argv as [string, string, string, string, string | undefined];
  if (!BRANCH.test(branch) || branch.startsWith('-')) usage('invalid branch name');
  if (commit !== undefined && !COMMIT.test(commit)) usage('invalid commit: 40 or 64 lower-case hex digits');
  if (!spool.startsWith('/') || !existsSync(spool) || !statSync(spool).isDirectory()) usage(`no spool directory ${spool}`);
  const seconds = (name: string, fallback: number) => {
    const value = Number(process.env[name] ?? fallback);
    if (!Number.isFinite(value) || value <= 0) usage(`${name} must be a positive number of seconds`);
    return value * 1000;
  };
  const cancelled = new Promise<number>((resolve) => {
    process.once('SIGTERM', () => resolve(143));
    process.once('SIGINT', () => resolve(130));
  });
  return submit({
    spool,
    branch,
    ...(commit ? { commit } : {}),
    pickupTimeoutMs: seconds('BUILD_PICKUP_TIMEOUT_SECONDS', 60),
    cancelGraceMs: seconds('BUILD_CANCEL_GRACE_SECONDS', 60),
    write: (chunk) => process.stdout.write(chunk),
    cancelled,
  });
}

runAsCommand(import.meta.url, main);
