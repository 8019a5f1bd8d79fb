import type { APIRoute } from 'astro';
import { DEV_TOKEN_COOKIE } from '../lib/session.js';

/** Ends the development sign-in; a Kratos session ends at Kratos' logout. */
export const GET: APIRoute = ({ cookies, redirect }) => {
  cookies.delete(DEV_TOKEN_COOKIE, { path: '/' });
  return redirect('/', 303);
};
