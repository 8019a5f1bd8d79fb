// Entry point of the Pulumi program (Pulumi.yaml `main`): the stack outputs.
export { branchSites, caddyfile, endpoints, geoserverAdminPassword, images, jobs, oauth2ClientsSync, webhookSecrets } from './program.js';
