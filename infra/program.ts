import * as pulumi from '@pulumi/pulumi';
import { loadStackConfig } from './config.js';
import { loadSecrets } from './secrets.js';
import { declareStack } from './stack.js';

/**
 * The Pulumi program: configuration → secrets → resources. Importing this module declares the stack
 * (under `pulumi up`, or under the runtime mocks in the tests); index.ts re-exports the outputs.
 */
const config = new pulumi.Config();
export const stackConfig = loadStackConfig(config);
const secrets = loadSecrets(config, stackConfig.targets);

export const stack = declareStack(stackConfig, secrets);

/** Where everything answers once `pulumi up` is done. */
export const endpoints = Object.fromEntries(stack.routes.map((route) => [route.domain, `https://${route.domain} → ${route.upstream}`]));

/** The webhook secret of each deploy target, to paste into the git host (`pulumi stack output --show-secrets`). */
export const webhookSecrets = pulumi.secret(pulumi.all(secrets.webhookTargetSecrets));

export const geoserverAdminPassword = secrets.geoserverAdminPassword;
export const caddyfile = stack.caddyfile;
/** "succeeded" once every one-shot job exited 0; a failed job fails `pulumi up` here too, naming it. */
export const jobs = stack.jobsSucceeded;
export const branchSites = stack.siteServices;

/**
 * What the clients-sync job printed on its last run: `created <client_id>` with the generated
 * `client_secret` of a new confidential client (shown this once; Hydra keeps only a hash), or
 * `unchanged`/`updated`. Read it with `pulumi stack output --show-secrets oauth2ClientsSync`, store the
 * secret, and it is gone from the next run's output.
 */
export const oauth2ClientsSync = pulumi.secret(stack.jobs.clientsSync.containerLogs);
