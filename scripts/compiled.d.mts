/** Types of compiled.mjs (plain JavaScript: it runs before anything could compile TypeScript). */
export declare const repoRoot: string;
/**
 * The compiled form of `entry` (relative to the repository root), built if missing or stale; absolute
 * path. `also`: further entries (worker threads) bundled beside it as `<file name>.mjs`.
 */
export declare function compiled(entry: string, also?: string[]): Promise<string>;
