import { z } from 'zod';

/**
 * The site control channel: how a target's builder asks that target's site container to restart its
 * site after a deploy, without any control over Docker or the host.
 *
 * Transport: a Unix socket on a volume shared by exactly those two containers (mode 0660). One
 * request per connection, one line of JSON each way, at most MAX_LINE_BYTES. The only actions are
 * `restart` of the service the site container was configured with (anything else is
 * refused by name, so the channel cannot start arbitrary programs), `ping` for health checks, and
 * `probe`: the HTTP status the site answers to a GET of one path on its own port. The builder asks
 * for it to check a deploy (the deploy script's health check), because the builder shares no network
 * with the site: it learns the status, never the content.
 */

export const MAX_LINE_BYTES = 1024;
export const DEFAULT_SOCKET = '/run/sites/control.sock';

const serviceName = z.string().regex(/^astro-[a-z0-9._-]+$/i, 'a site service name such as astro-main');

export const ControlRequestSchema = z.discriminatedUnion('action', [
  z.object({ action: z.literal('restart'), service: serviceName }).strict(),
  z.object({ action: z.literal('ping') }).strict(),
  // An origin-form path of printable ASCII only: nothing that could end the request line early.
  z.object({ action: z.literal('probe'), service: serviceName, path: z.string().regex(/^\/[\x21-\x7e]{0,200}$/, 'a path such as /') }).strict(),
]);

export type ControlRequest = z.infer<typeof ControlRequestSchema>;

export type ControlResponse = { ok: true; service?: string; pid?: number; status?: number } | { ok: false; error: string };
