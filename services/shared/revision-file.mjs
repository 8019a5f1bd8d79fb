// What is live in a target's directory, read safely: a release name and the commit id in its
// REVISION. Shared by everything that reads a target's directory with more privilege than the
// target's build has: the webhook's deploy launcher (services/webhook/src/deployments/
// launcher-process.mjs, plain Node without a loader, hence JavaScript) and a target's builder
// (infra/builder/builder.ts). Types: revision-file.d.mts.
//
// REVISION is written by the deploy script as root after sealing, but a release sealed by an older
// script may hold whatever its build left under that name: a FIFO (a plain read waits for a writer
// forever), a link to a root-only file (a plain read follows it and copies the file out), gigabytes.
// So it is opened without following a link or waiting for a writer (O_NOFOLLOW | O_NONBLOCK), read
// only when it is a regular file of at most REVISION_MAX_BYTES, within a time limit and off the
// event loop, and its content is returned only when it is a commit id: nothing of a target can stall
// the reader or reach anyone through it but a commit id.
import { constants } from 'node:fs';
import { open } from 'node:fs/promises';

/** A commit id as git writes it: 40 (SHA-1) or 64 (SHA-256) lower-case hex digits. */
export const COMMIT_ID = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
/** A release directory's name: a 14-digit UTC timestamp (deploy-branch.sh). */
export const RELEASE_NAME = /^\d{14}$/;
/** The most REVISION may hold: a 64-digit commit id and a newline. */
export const REVISION_MAX_BYTES = 65;
/** How long reading REVISION may take before it counts as unreadable. */
export const REVISION_READ_MS = 2_000;

/** The value when it is a commit id, else null. */
export const commitIdOrNull = (value) => (typeof value === 'string' && COMMIT_ID.test(value) ? value : null);
/** The value when it is a release name, else null. */
export const releaseNameOrNull = (value) => (typeof value === 'string' && RELEASE_NAME.test(value) ? value : null);

async function readCommit(path) {
  let handle;
  try {
    handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    const stat = await handle.stat();
    if (!stat.isFile() || stat.size > REVISION_MAX_BYTES) return null;
    const buffer = Buffer.alloc(REVISION_MAX_BYTES + 1);
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
    const text = buffer.toString('latin1', 0, bytesRead);
    return commitIdOrNull(text.endsWith('\n') ? text.slice(0, -1) : text);
  } catch {
    return null;
  } finally {
    await handle?.close().catch(() => undefined);
  }
}

/**
 * The commit id in a REVISION file, or null: when it is missing, not a regular file (a FIFO, a
 * folder, a device), a link, larger than REVISION_MAX_BYTES, not a commit id, or not read within
 * `timeoutMs`. Never follows a link, never waits for a writer, never rejects.
 */
export async function readRevisionFile(path, timeoutMs = REVISION_READ_MS) {
  let timer;
  const late = new Promise((resolve) => {
    timer = setTimeout(() => resolve(null), timeoutMs);
  });
  try {
    return await Promise.race([readCommit(path), late]);
  } finally {
    clearTimeout(timer);
  }
}
