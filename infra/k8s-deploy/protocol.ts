import { siteHostOf } from '../stack/targets.js';

/**
 * What the Pulumi program (infra/k8s/sites.ts) and the deploy driver (infra/k8s-deploy) agree on,
 * in one place: the ConfigMap a target's template is in, the steps of a build pod, the exit codes
 * those steps use, and the annotations on a site Deployment.
 */

/**
 * The driver's exit codes: scripts/deploy-branch.sh's, so the webhook reads both alike
 * (9 is `refused`, 0 `succeeded`, everything else `failed`).
 */
export const EXIT = {
  deployed: 0,
  error: 1,
  usage: 2,
  fetch: 4,
  dependencies: 5,
  build: 6,
  /** The site Deployment could not be set to the new image: nothing changed. */
  patch: 7,
  /** The rollout did not become available in time: the previous image was put back. */
  rollout: 8,
  /** The commit is not on the branch, or older than the one the site runs. */
  refused: 9,
  interrupted: 130,
  terminated: 143,
} as const;

/** The build pod's containers, in the order they run (two init containers, then the publish step). */
export const BUILD_STEPS = { fetch: 'fetch', build: 'build', publish: 'publish' } as const;

/**
 * The exit code of the deploy when a step failed with `code`: the fetch step says 9 for a refused
 * commit (the rest is a failed fetch); the build step 5 for `npm ci` (the rest is the build); a
 * failed publish is a build that produced no image.
 */
export function exitOfStep(step: string, code: number | undefined): number {
  if (step === BUILD_STEPS.fetch) return code === EXIT.refused ? EXIT.refused : EXIT.fetch;
  if (step === BUILD_STEPS.build) return code === EXIT.dependencies ? EXIT.dependencies : EXIT.build;
  return EXIT.build;
}

/** The ConfigMap holding a target's Job template (`job.json`) and its site's place (`site.json`). */
export const buildTemplateName = (deployPath: string) => `build-${siteHostOf({ deployPath }).replace(/^site-/, '')}`;

/** On a site Deployment: the replicas a deploy sets (the program's), the release the driver last set. */
export const ANNOTATIONS = {
  replicas: 'geodata.example.org/replicas',
  release: 'geodata.example.org/release',
} as const;
