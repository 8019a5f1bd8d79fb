// Entry point of the Pulumi program (Pulumi.yaml `main`): the stack outputs.
export { branchSites, caddyfile, endpoints, geoserverAdminPassword, jobs, oauth2ClientsSync, webhookSecrets } from './program.js';
