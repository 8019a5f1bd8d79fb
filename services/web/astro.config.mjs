// The web app: server-rendered pages (protected routes are guarded on the server) with client islands.
// Nothing deployment-specific is read here: URLs come from the environment when the server runs
// (src/config.ts), so one build serves every target.
import { defineConfig } from 'astro/config';
import node from '@astrojs/node';

export default defineConfig({
  output: 'server',
  adapter: node({ mode: 'standalone' }),
  // The port and host come from WEB_PORT/HOST at run time (scripts set PORT for the standalone server).
  server: { port: 4321, host: '127.0.0.1' },
  telemetry: false,
  devToolbar: { enabled: false },
  vite: {
    // The feature schema lives in services/shared, outside this project's root.
    server: { fs: { allow: ['../..'] } },
    build: { chunkSizeWarningLimit: 1024 },
  },
});
