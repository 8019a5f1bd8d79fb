// The web app: server-rendered pages (protected routes are guarded on the server) with client islands.
// Nothing deployment-specific is read here: URLs come from the environment when the server runs
// (src/config.ts), so one build serves every target.
import { defineConfig, passthroughImageService } from 'astro/config';
import node from '@astrojs/node';

/**
 * Packages imported by services/shared (the feature schema, the Kratos guard). A deploy installs only
 * this folder's package.json, so there is no node_modules above services/shared: these must resolve
 * from the site's own node_modules, and in development there must be one copy of each (one zod).
 */
export const sharedDependencies = ['zod', 'zod-openapi', '@ory/kratos-client', '@ory/hydra-client', 'axios'];

export default defineConfig({
  output: 'server',
  adapter: node({ mode: 'standalone' }),
  // The port and host come from WEB_PORT/HOST at run time (scripts set PORT for the standalone server).
  server: { port: 4321, host: '127.0.0.1' },
  telemetry: false,
  devToolbar: { enabled: false },
  // The site has no raster images to optimise: no sharp at build or run time.
  image: { service: passthroughImageService() },
  vite: {
    resolve: { dedupe: sharedDependencies },
    // The feature schema lives in services/shared, outside this project's root.
    server: { fs: { allow: ['../..'] } },
    build: {
      chunkSizeWarningLimit: 1024,
      // A deploy builds on the target host: no source maps to ship, and no second gzip pass over
      // every chunk only to print its size (several seconds of a redeploy).
      sourcemap: false,
      reportCompressedSize: false,
    },
  },
});
