import { beforeAll, describe, expect, it } from 'vitest';
import { declareDockerUnderMocks, resolved, type RegisteredResource } from '../testing/pulumi-mocks.js';

/**
 * The stack with two failed one-shot jobs that nothing but the platform's users need: the OAuth2
 * clients sync (a Hydra still starting) and GeoServer's provisioning. Before, nothing read their exit
 * codes and `pulumi up` reported the stack up. Now the proxy, which opens the platform, is never
 * created, and the deployment fails naming each job.
 */

const CONTAINER = 'docker:index/container:Container';
let registered: RegisteredResource[];
const errors: string[] = [];

beforeAll(async () => {
  const onRejection = (reason: unknown) => errors.push(String(reason instanceof Error ? reason.message : reason));
  process.on('unhandledRejection', onRejection);
  const declared = await declareDockerUnderMocks({ jobExitCodes: { 'clients-sync': 1, 'geoserver-provision': 3 } });
  registered = declared.registered;
  const { containers, jobs } = declared.program.stack;
  await Promise.all([containers.webhook.id, containers.geoserver.id, jobs.clientsSync.exitCode, jobs.geoserverProvision.exitCode].map((o) => resolved<unknown>(o)));
  await new Promise((resolve) => setTimeout(resolve, 300));
  return () => process.off('unhandledRejection', onRejection);
});

const container = (name: string) => registered.find((r) => r.type === CONTAINER && r.name === name);

describe('failed one-shot jobs gate the platform', () => {
  it('the proxy is never created, so nothing of the platform is published', () => {
    expect(container('clients-sync')).toBeDefined();
    expect(container('geoserver-provision')).toBeDefined();
    expect(container('proxy')).toBeUndefined();
  });

  it('the deployment fails naming each failed job and its exit code', () => {
    const all = errors.join('\n');
    expect(all).toContain('job clients-sync exited with code 1');
    expect(all).toContain('job geoserver-provision exited with code 3');
  });
});
