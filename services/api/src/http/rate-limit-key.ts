import type { FastifyRequest } from 'fastify';
import type { normalizeIP } from '@fastify/rate-limit';
import proxyAddress from 'proxy-addr';
import type { Authenticator, Principal } from '../../../shared/principal.js';

/**
 * Whose budget a change counts against (the change limit in app.ts, docs/api.md "Rate limit").
 *
 * - An authenticated caller: their own budget (`user:<id>`), whatever address they come from. In the
 *   stack every request arrives from the proxy, so keying on the address alone is one bucket for all.
 * - Anyone else (no credentials, or credentials that fail): the client address (`ip:<address>`, an
 *   IPv6 address by its /56, @fastify/rate-limit's normalizeIP). That is the TCP peer,
 *   unless the peer is a proxy named in API_TRUST_PROXY: then proxy-addr walks X-Forwarded-For
 *   from the right, past the trusted hops, to the first address that is not one. What a client
 *   writes into the header itself is never believed: it sits left of the hop the proxy appended.
 *   A forged token, whatever subject it claims, fails authentication and counts as its address.
 *
 * request.ip is Fastify's client address, computed by proxy-addr with the app's trust function.
 */
export function changeLimitKey(options: { authenticator: Authenticator }) {
  const { authenticator } = options;
  // From the plugin's module, which app.ts loads only when the limit is on (this key runs only then).
  let normalize: typeof normalizeIP | undefined;
  return async (request: FastifyRequest): Promise<string> => {
    let principal: Principal | undefined;
    try {
      principal = await authenticator.authenticate(request.raw);
    } catch {
      // Refused credentials: counted by address (authentication refuses the request itself).
    }
    if (principal?.id) return `user:${principal.id}`;
    normalize ??= (await import('@fastify/rate-limit')).normalizeIP;
    return `ip:${normalize(request.ip, 56)}`;
  };
}

export type TrustFunction = (address: string, hop: number) => boolean;

/** proxy-addr's trust function for API_TRUST_PROXY's list; an empty list trusts no peer. */
export function trustFunction(trusted: readonly string[]): TrustFunction {
  return trusted.length > 0 ? proxyAddress.compile([...trusted]) : () => false;
}

/**
 * The authenticator answering once per request: the change limit's key and the scopes' resolveCaller()
 * both ask for the same request's caller, and a session cookie or an opaque
 * token costs a call to Kratos or Hydra (cached, but still). The answer is kept on the request object
 * under a symbol of this authenticator's own, so it goes with the request. (Not a WeakMap keyed by
 * the request: its insert, and the collector's clearing of an entry per request, cost about 0.25 µs
 * per request against 0.01 µs for the property, measured on Node 20.) A rejection is kept too: the
 * same credentials fail the same way.
 */
export function oncePerRequest(authenticator: Authenticator): Authenticator {
  const answer = Symbol('the caller, once per request');
  return {
    authenticate(request) {
      const slot = request as { [answer]?: Principal | Promise<Principal> };
      return (slot[answer] ??= authenticator.authenticate(request));
    },
  };
}
