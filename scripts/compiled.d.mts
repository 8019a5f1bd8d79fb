/** Types of compiled.mjs (plain JavaScript: it runs before anything could compile TypeScript). */
export declare const repoRoot: string;
/** The compiled form of `entry` (relative to the repository root), built if missing or stale; absolute path. */
export declare function compiled(entry: string): Promise<string>;
