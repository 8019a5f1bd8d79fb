// Entry point of the Pulumi program (Pulumi.yaml `main`): the stack outputs.
export { branchSites, caddyfile, endpoints, geoserverAdminPassword, webhookSecrets } from './program.js';
