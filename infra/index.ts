// Entry point of the Pulumi program (Pulumi.yaml `main`): the stack outputs.
export { branchSites, caddyfile, endpoints, geoserverAdminPassword, oauth2ClientsSync, webhookSecrets } from './program.js';
