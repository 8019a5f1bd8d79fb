import * as docker from '@pulumi/docker';
import { join } from 'node:path';
import { REPO_ROOT } from '../config.js';
import { IMAGES, PROJECT_IMAGES, projectImageName } from '../images.js';
import type { StackContext } from './common.js';

/**
 * The images: third-party ones pulled at their pinned versions, the project's own built from the
 * repository's Dockerfiles. A project image's tag ends in the hash of the files its Dockerfile copies
 * (infra/images.ts), so changed code is a new reference and replaces the containers that run it.
 */
export function declareImages({ cfg }: StackContext) {
  const remoteImage = (name: string, reference: string) => new docker.RemoteImage(name, { name: reference, keepLocally: true });
  const remote = {
    postgis: remoteImage('image-postgis', IMAGES.postgis),
    postgres: remoteImage('image-postgres', IMAGES.postgres),
    geoserver: remoteImage('image-geoserver', IMAGES.geoserver),
    kratos: remoteImage('image-kratos', IMAGES.kratos),
    hydra: remoteImage('image-hydra', IMAGES.hydra),
    caddy: remoteImage('image-caddy', IMAGES.caddy),
  };
  const selfServiceUi = cfg.selfServiceUi ? remoteImage('image-kratos-selfservice-ui', IMAGES.kratosSelfServiceUi) : undefined;
  const build = (name: keyof typeof PROJECT_IMAGES) =>
    new docker.Image(name, {
      imageName: projectImageName(REPO_ROOT, cfg.namePrefix, name, cfg.imageTag),
      build: { context: REPO_ROOT, dockerfile: join(REPO_ROOT, 'infra/docker', PROJECT_IMAGES[name]), platform: 'linux/amd64' },
      // The images run on the Docker host that builds them; there is no registry to push to.
      skipPush: true,
    });
  const built = { api: build('api'), webhook: build('webhook'), login: build('login'), ops: build('ops') };
  return { remote, selfServiceUi, built };
}

export type StackImages = ReturnType<typeof declareImages>;
