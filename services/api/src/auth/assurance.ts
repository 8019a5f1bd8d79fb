import type { FastifyRequest, onRequestHookHandler } from 'fastify';
import { AppError } from '../../../shared/errors.js';
import type { Principal, Role } from '../../../shared/principal.js';
import { askSessionAgain, principalOf, routeGuard } from './middleware.js';
import { effectiveRole } from './permissions.js';

/**
 * AAL2 where it matters: the actions a phished password must not be enough for (approving, rejecting,
 * deleting, role changes, the admin endpoints) need a sign-in with a second factor in this session for
 * the roles of the policy (reviewer and admin by default, `AUTH_AAL2_ROLES`).
 *
 * The assurance level comes from the Kratos session (`authenticator_assurance_level`) for cookie
 * sessions and from the token's `acr`/`amr` (set at login from the Kratos session, docs/identity.md)
 * for Hydra tokens; a credential that states none counts as aal1. A lower session gets 403
 * AAL2_REQUIRED naming the step-up, so a browser app can send the user through Kratos' login with
 * `aal=aal2` and back, and an OAuth2 client can authorize again with `acr_values=aal2` (RFC 9470's
 * challenge in WWW-Authenticate).
 */

export interface AssurancePolicy {
  /** Roles whose sensitive actions need aal2. */
  aal2Roles: readonly Role[];
}

export const DEFAULT_ASSURANCE: AssurancePolicy = Object.freeze({ aal2Roles: Object.freeze(['reviewer', 'admin'] as Role[]) });

/** The step-up every client can follow: Kratos' browser login asking for the second factor. */
export const STEP_UP_PATH = '/self-service/login/browser?aal=aal2';

/** Where the app keeps its policy (decorated as `assurance`, app.ts); the default when the app sets none. */
export function policyOf(request: FastifyRequest): AssurancePolicy {
  return (request.server as { assurance?: AssurancePolicy }).assurance ?? DEFAULT_ASSURANCE;
}

export function needsStepUp(principal: Principal, policy: AssurancePolicy = DEFAULT_ASSURANCE): boolean {
  if (principal.via === 'anonymous') return false;
  return policy.aal2Roles.includes(effectiveRole(principal)) && principal.aal !== 'aal2';
}

export function aal2Required(what: string): AppError {
  return new AppError('AAL2_REQUIRED', `a second factor is required to ${what}: step up with Kratos' ${STEP_UP_PATH}&return_to=<this page> (or authorize again with acr_values=aal2) and retry`, {
    statusCode: 403,
    headers: { 'WWW-Authenticate': 'Bearer realm="api", error="insufficient_user_authentication", error_description="a second factor is required", acr_values="aal2"' },
  });
}

/** Throws AAL2_REQUIRED when the caller's role needs a second factor for `what` and this sign-in had none. */
export function assertAssurance(principal: Principal, what: string, policy: AssurancePolicy = DEFAULT_ASSURANCE): void {
  if (needsStepUp(principal, policy)) throw aal2Required(what);
}

/**
 * The route guard, after the permission check: `onRequest: [requirePermission(…), requireSecondFactor('approve features')]`.
 * Before refusing, a cached session is asked again: the person may have just stepped up.
 */
export function requireSecondFactor(what: string): onRequestHookHandler {
  return routeGuard(
    (request) => needsStepUp(principalOf(request), policyOf(request)),
    (request) => assertAssurance(principalOf(request), what, policyOf(request)),
  );
}

/** The same check inside a handler, after its own permission check (GET /api/auth/forward). */
export async function ensureSecondFactor(request: FastifyRequest, what: string): Promise<void> {
  const policy = policyOf(request);
  if (needsStepUp(principalOf(request), policy)) await askSessionAgain(request);
  assertAssurance(principalOf(request), what, policy);
}

/** `AUTH_AAL2_ROLES`: comma-separated roles, `none` for none; unknown names are refused by the config schema. */
export function parseAal2Roles(value: string): Role[] {
  const names = value.split(',').map((r) => r.trim()).filter((r) => r !== '' && r !== 'none');
  return names as Role[];
}
