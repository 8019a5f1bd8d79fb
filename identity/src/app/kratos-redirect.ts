import type { IdentityAppConfig } from './config.js';

/** The browser URL that starts a Kratos login flow and comes back to `returnTo` afterwards. */
export function kratosLoginUrl(config: Pick<IdentityAppConfig, 'kratosPublicUrl'>, returnTo: string, options: { refresh?: boolean; aal2?: boolean } = {}): string {
  const url = new URL(`${config.kratosPublicUrl}/self-service/login/browser`);
  if (options.refresh) url.searchParams.set('refresh', 'true');
  if (options.aal2) url.searchParams.set('aal', 'aal2');
  url.searchParams.set('return_to', returnTo);
  return url.toString();
}
