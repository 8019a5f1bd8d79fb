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
    const principal = await authenticator.authenticate(request.raw).catch(() => undefined);
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
 * The authenticator answering once per request: the change limit's key and the scopes' authenticate()
 * both ask for the same request's caller, and a session cookie or an opaque
 * token costs a call to Kratos or Hydra (cached, but still). Keyed weakly by the request object, so
 * the answer goes with the request. A rejection is kept too: the same credentials fail the same way.
 */
export function oncePerRequest(authenticator: Authenticator): Authenticator {
  const answers = new WeakMap<object, Promise<Principal>>();
  return {
    authenticate(request) {
      let answer = answers.get(request);
      if (!answer) {
        answer = authenticator.authenticate(request);
        answers.set(request, answer);
      }
      return answer;
    },
  };
}
