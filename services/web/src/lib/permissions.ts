/**
 * What the UI offers for a feature, and why not — the API's rules (services/api/src/auth/permissions.ts
 * and the review lock in features/service.ts) restated so a control is hidden or explained instead of
 * failing at Save. The API decides again on every request. Pure, so server pages and browser islands
 * share it.
 */
export interface Viewer {
  id: string;
  role: string;
}

/** Contributors, reviewers and admins may create and (their own) edit; guests only read. */
export const mayWrite = (role: string | undefined): boolean => role === 'contributor' || role === 'reviewer' || role === 'admin';

/**
 * Why the viewer may not edit this feature, as a catalogue key, or undefined when they may. A feature in
 * review (in_qc) is locked for everyone until a reviewer decides; otherwise admins edit everything and
 * the others their own features.
 */
export function editRefusal(viewer: Viewer | undefined, properties: { createdBy?: string | undefined; status?: string | undefined }): 'edit.inReview' | 'edit.notOwner' | undefined {
  if (!viewer || !mayWrite(viewer.role)) return 'edit.notOwner';
  if (properties.status === 'in_qc') return 'edit.inReview';
  if (viewer.role === 'admin') return undefined;
  return properties.createdBy !== undefined && properties.createdBy === viewer.id ? undefined : 'edit.notOwner';
}

/** Why the viewer may not delete this feature, or undefined: admins only, and not while in review. */
export function deleteRefusal(viewer: Viewer | undefined, properties: { status?: string | undefined }): 'edit.inReview' | 'edit.deleteAdmin' | undefined {
  if (viewer?.role !== 'admin') return 'edit.deleteAdmin';
  return properties.status === 'in_qc' ? 'edit.inReview' : undefined;
}
