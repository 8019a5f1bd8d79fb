/**
 * The build spool of one deploy target: a directory on a volume that exactly two containers mount, the
 * webhook server and that target's builder. It is the only way a deploy reaches the builder: the
 * webhook never holds a Docker socket, and the builder never listens on a network.
 *
 * Layout (one target):
 *   jobs/<id>.json     a deploy request, written by the webhook's submit client (temp name, then rename):
 *                      { id, branch, commit? } and nothing else; the repository, the port, the directory
 *                      and the users are the builder's own configuration, never the request's
 *   jobs/<id>.taken    the request once the builder took it (rename: taken once)
 *   jobs/<id>.log      the deploy script's output, appended by the builder; the client copies it
 *   jobs/<id>.exit     the deploy script's exit code, written last (temp name, then rename)
 *   jobs/<id>.cancel   the client asks the builder to stop the deploy (its own deadline passed)
 *   logs/              the webhook launcher's own deploy logs
 *   live -> deploys/<release>, deploys/<release>/REVISION
 *                      what is live, mirrored by the builder, so the webhook reads the live commit
 *                      without seeing a release
 *   .heartbeat         touched by the builder while it runs (its health check reads the age)
 */
import { randomBytes } from 'node:crypto';
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';

export const JOB_ID = /^[0-9a-z][0-9a-z-]{7,63}$/;
/** What git accepts as a branch name, narrowed to printable characters without the ones refs forbid. */
export const BRANCH = /^[^\0-\x20\x7f~^:?*[\\]{1,255}$/;
export const COMMIT = /^([0-9a-f]{40}|[0-9a-f]{64})$/;

export const JobSchema = z
  .object({
    id: z.string().regex(JOB_ID),
    branch: z.string().regex(BRANCH).refine((b) => !b.startsWith('-'), 'a branch name'),
    commit: z.string().regex(COMMIT).optional(),
  })
  .strict();

export type Job = z.infer<typeof JobSchema>;

/** Largest request file the builder reads (a request is three short strings). */
export const MAX_JOB_BYTES = 1024;

export const spoolPaths = (spool: string) => ({
  jobs: join(spool, 'jobs'),
  logs: join(spool, 'logs'),
  live: join(spool, 'live'),
  deploys: join(spool, 'deploys'),
  heartbeat: join(spool, '.heartbeat'),
  request: (id: string) => join(spool, 'jobs', `${id}.json`),
  taken: (id: string) => join(spool, 'jobs', `${id}.taken`),
  log: (id: string) => join(spool, 'jobs', `${id}.log`),
  exit: (id: string) => join(spool, 'jobs', `${id}.exit`),
  cancel: (id: string) => join(spool, 'jobs', `${id}.cancel`),
});

export function newJobId(): string {
  return `${Date.now().toString(36)}-${randomBytes(6).toString('hex')}`;
}

/** Write a whole file under a temporary name, then rename it into place: readers see all or nothing. */
export function writeAtomically(path: string, content: string, mode = 0o644): void {
  const temp = `${path}.tmp-${process.pid}-${randomBytes(3).toString('hex')}`;
  writeFileSync(temp, content, { mode, flag: 'wx' });
  renameSync(temp, path);
}
