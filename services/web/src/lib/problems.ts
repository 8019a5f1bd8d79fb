import type { Translate } from '../i18n/index.js';

/**
 * The API's refusals (RFC 9457 problem+json, services/shared/errors.ts) in the reader's language. The
 * API words its `detail` in English for developers; the page shows the catalogue's sentence for the
 * `code` instead, refined by the few details a user can act on (who may change a feature, the review
 * state, four-eyes). Unknown codes fall back to "Error <status>", never to the English text.
 */
export interface Problem {
  code?: string;
  detail?: string;
  title?: string;
  status?: number;
  fields?: Array<{ field: string; message: string }>;
}

export async function readProblem(response: Response): Promise<Problem> {
  const body = (await response.json().catch(() => ({}))) as Problem;
  return { ...body, status: body.status ?? response.status };
}

export function problemMessage(t: Translate, problem: Problem, formatTime: (iso: string) => string = (iso) => iso): string {
  const detail = problem.detail ?? '';
  switch (problem.code) {
    case 'FORBIDDEN':
      if (detail.includes('four-eyes')) return t('problem.fourEyes');
      if (detail.includes('only the creator')) return t('problem.notCreator');
      if (detail.startsWith('role ')) return t('problem.role');
      return t('problem.forbidden');
    case 'AAL2_REQUIRED':
      return t('problem.aal2');
    case 'EMAIL_NOT_VERIFIED':
      return t('problem.emailNotVerified');
    case 'INVALID_STATE':
      return detail.includes('(in_qc)') ? t('problem.inReview') : t('problem.invalidState');
    case 'CLAIMED': {
      // "<name> (<id>) is reviewing this feature (claim until <ISO time>)": the holder and the time, local.
      const match = /^(.*) is reviewing this feature \(claim until (.+)\)$/.exec(detail);
      return match ? t('problem.claimed', { holder: match[1]!, until: formatTime(match[2]!) }) : t('problem.invalidState');
    }
    case 'NOT_FOUND':
    case 'FEATURE_NOT_FOUND':
      return t('problem.notFound');
    case 'PRECONDITION_FAILED':
      return t('problem.stale');
    case 'UNAUTHENTICATED':
    case 'INVALID_TOKEN':
      return t('problem.signIn');
    case 'TOO_MANY_REQUESTS':
      return t('problem.tooMany');
    case 'VALIDATION_FAILED':
    case 'MALFORMED_JSON':
    case 'INVALID_QUERY':
      return problem.fields?.[0] ? fieldMessage(t, problem.fields[0].message) : t('problem.invalid');
    case 'CONFLICT':
      return t('problem.conflict');
    case 'SERVICE_UNAVAILABLE':
      return t('problem.unavailable');
    default:
      return t('problem.other', { status: problem.status ?? 0 });
  }
}

/**
 * A field message of the API (the shared zod schema's or PostGIS' ST_IsValidReason, "is not valid:
 * Self-intersection[13.4 52.5]") in the catalogue's words; the API's text only for a rule the
 * catalogue does not know, after "Ungültig:".
 */
export function fieldMessage(t: Translate, message: string): string {
  const reason = message.startsWith('is not valid: ') ? message.slice('is not valid: '.length) : undefined;
  if (reason !== undefined) {
    if (/self-intersection/i.test(reason)) return t('geometry.selfIntersection');
    if (/too few points/i.test(reason)) return t('geometry.tooFewPoints');
    if (/hole lies outside/i.test(reason)) return t('geometry.holeOutside');
    if (/nested|disconnected|duplicate rings/i.test(reason)) return t('geometry.rings');
  }
  if (message.includes('must not be empty')) return t('error.required');
  return t('error.invalid', { message });
}
