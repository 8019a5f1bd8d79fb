import { z } from 'zod';
import { parseEnv, runMain } from '../../services/shared/config.js';
import { errorMessage } from '../../services/shared/retry.js';
import { GeoServerClient } from './client.js';
import { provisionGeoServer } from './provision.js';

/**
 * `npm run geoserver:provision`: bring GeoServer to the platform's configuration (see provision.ts).
 * Runs by hand against any GeoServer, and as the stack's geoserver-provision job after every deploy
 * that changes its inputs. Prints what it changed; a second run prints "no changes".
 *
 * GeoServer starts slowly: until its REST API answers, a refused connection, a timeout or a 5xx is
 * tried again with exponential backoff and jitter for up to GEOSERVER_READY_TIMEOUT_SECONDS (default
 * 300); a 4xx (wrong credentials, wrong URL) fails at once.
 *
 * Exit codes: 0 done (changed or not), 1 GeoServer refused or did not answer in time, 2 bad environment.
 */
const Env = z.object({
  GEOSERVER_URL: z.string().url().default('http://localhost:8080/geoserver'),
  GEOSERVER_ADMIN_USER: z.string().min(1).default('admin'),
  GEOSERVER_ADMIN_PASSWORD: z.string().min(1),
  GEOSERVER_WORKSPACE: z.string().regex(/^[A-Za-z_][A-Za-z0-9_-]*$/).default('geodata'),
  GEOSERVER_NAMESPACE_URI: z.string().url().default('https://geodata.example.org/features'),
  GEOSERVER_DATASTORE: z.string().regex(/^[A-Za-z_][A-Za-z0-9_-]*$/).default('features-db'),
  GEOSERVER_DB_HOST: z.string().min(1).default('features-db'),
  GEOSERVER_DB_PORT: z.coerce.number().int().min(1).max(65535).default(5432),
  GEOSERVER_DB_NAME: z.string().min(1).default('features'),
  GEOSERVER_DB_SCHEMA: z.string().min(1).default('features'),
  GEOSERVER_DB_USER: z.string().min(1).default('geoserver'),
  GEOSERVER_DB_PASSWORD: z.string().min(1),
  GEOSERVER_LAYER: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/).default('features'),
  GEOSERVER_PUBLIC_LAYER: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/).default('public_features'),
  GEOSERVER_WRITE_ROLES: z.string().min(1).default('ROLE_AUTHENTICATED'),
  GEOSERVER_READY_TIMEOUT_SECONDS: z.coerce.number().int().min(1).default(300),
  /** GeoServer's data directory mounted here: the HTTP-header authentication of WFS-T users is written into it. */
  GEOSERVER_DATA_DIR: z.string().min(1).optional(),
  GEOSERVER_USER_HEADER: z.string().regex(/^[A-Za-z][A-Za-z0-9-]*$/).default('X-Geodata-User'),
  GEOSERVER_ROLE_HEADER: z.string().regex(/^[A-Za-z][A-Za-z0-9-]*$/).default('X-Geodata-Role'),
});

runMain(async () => {
  const env = parseEnv(Env);
  const client = new GeoServerClient({ baseUrl: env.GEOSERVER_URL, user: env.GEOSERVER_ADMIN_USER, password: env.GEOSERVER_ADMIN_PASSWORD });
  let report;
  try {
    report = await provisionGeoServer(client, {
      workspace: env.GEOSERVER_WORKSPACE,
      namespaceUri: env.GEOSERVER_NAMESPACE_URI,
      datastore: env.GEOSERVER_DATASTORE,
      database: {
        host: env.GEOSERVER_DB_HOST,
        port: env.GEOSERVER_DB_PORT,
        name: env.GEOSERVER_DB_NAME,
        schema: env.GEOSERVER_DB_SCHEMA,
        user: env.GEOSERVER_DB_USER,
        password: env.GEOSERVER_DB_PASSWORD,
      },
      layer: env.GEOSERVER_LAYER,
      publicLayer: env.GEOSERVER_PUBLIC_LAYER,
      geometryProperty: 'geom',
      title: 'Features (Friedhöfe, Blumenbeete, Denkmäler)',
      readRoles: '*',
      writeRoles: env.GEOSERVER_WRITE_ROLES,
      readyTimeoutMs: env.GEOSERVER_READY_TIMEOUT_SECONDS * 1000,
      onRetry: ({ attempt, delayMs, error }) => console.error(`geoserver: not ready (${errorMessage(error)}); attempt ${attempt + 1} in ${(delayMs / 1000).toFixed(1)} s`),
      ...(env.GEOSERVER_DATA_DIR
        ? { dataDir: env.GEOSERVER_DATA_DIR, headerAuthentication: { userHeader: env.GEOSERVER_USER_HEADER, roleHeader: env.GEOSERVER_ROLE_HEADER } }
        : {}),
    });
  } catch (error) {
    // The client's messages name the method, path and status, never the credentials.
    console.error(`geoserver-provision failed: ${errorMessage(error)}`);
    process.exitCode = 1;
    return;
  }
  if (report.changes.length === 0) console.log('geoserver: no changes');
  for (const change of report.changes) console.log(`geoserver: ${change}`);
});
