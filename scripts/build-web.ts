/**
 * Builds the web app unless services/web/dist is current (services/web/launch.ts decides). `npm start`
 * runs this in a child process of its own, beside the API's start. Exit codes: 0 built or current, 1 failed.
 */
import { ensureWebBuild } from '../services/web/launch.js';

try {
  ensureWebBuild((message) => console.log(message));
} catch (error) {
  console.error((error as Error).message);
  process.exit(1);
}
