// @ts-check
/**
 * `npm start` runs this: scripts/start.ts, compiled once into .cache/start/ and reused while its
 * sources are unchanged (see compiled.mjs), so the platform starts without a TypeScript loader.
 */
import { pathToFileURL } from 'node:url';
import { compiled } from './compiled.mjs';

await import(pathToFileURL(await compiled('scripts/start.ts')).href);
