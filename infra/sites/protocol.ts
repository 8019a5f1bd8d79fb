import { z } from 'zod';

/**
 * The sites control channel: how the webhook container asks the sites container to restart one
 * branch site, without any control over Docker or the host.
 *
 * Transport: a Unix socket on a volume shared by exactly those two containers (mode 0660). One
 * request per connection, one line of JSON each way, at most MAX_LINE_BYTES. The only actions are
 * `restart` of a service the sites container itself derived from the targets file (anything else is
 * refused by name, so the channel cannot start arbitrary programs) and `ping` for health checks.
 */

export const MAX_LINE_BYTES = 1024;
export const DEFAULT_SOCKET = '/run/sites/control.sock';

export const ControlRequestSchema = z.discriminatedUnion('action', [
  z.object({ action: z.literal('restart'), service: z.string().regex(/^astro-[a-z0-9._-]+$/i, 'a site service name such as astro-main') }).strict(),
  z.object({ action: z.literal('ping') }).strict(),
]);

export type ControlRequest = z.infer<typeof ControlRequestSchema>;

export type ControlResponse = { ok: true; service?: string; pid?: number } | { ok: false; error: string };
