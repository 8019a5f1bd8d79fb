// Types of revision-file.mjs (JavaScript so that the webhook's deploy launcher, plain Node without a
// loader, can import it too).

/** A commit id as git writes it: 40 (SHA-1) or 64 (SHA-256) lower-case hex digits. */
export declare const COMMIT_ID: RegExp;
/** A release directory's name: a 14-digit UTC timestamp (deploy-branch.sh). */
export declare const RELEASE_NAME: RegExp;
/** The most REVISION may hold: a 64-digit commit id and a newline. */
export declare const REVISION_MAX_BYTES: number;
/** How long reading REVISION may take before it counts as unreadable. */
export declare const REVISION_READ_MS: number;
/** The value when it is a commit id, else null. */
export declare function commitIdOrNull(value: unknown): string | null;
/** The value when it is a release name, else null. */
export declare function releaseNameOrNull(value: unknown): string | null;
/**
 * The commit id in a REVISION file, or null: when it is missing, not a regular file (a FIFO, a
 * folder, a device), a link, larger than REVISION_MAX_BYTES, not a commit id, or not read within
 * `timeoutMs` (default REVISION_READ_MS). Never follows a link, never waits for a writer, never rejects.
 */
export declare function readRevisionFile(path: string, timeoutMs?: number): Promise<string | null>;
