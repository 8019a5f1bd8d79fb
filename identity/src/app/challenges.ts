import type { Response } from 'express';
import { goneRedirect, oryStatus } from '../../../services/shared/ory/clients.js';
import { errorPage } from './html.js';

/**
 * Hydra's login, consent and logout challenges, handled the same way everywhere: a challenge that was
 * already answered (a reload, the back button, a second tab) makes Hydra reply 410 with `redirect_to`,
 * and the browser is sent there — never shown an error.
 */

/**
 * Fetch a challenge's request. Resolves undefined when the response has been sent instead: the 410
 * redirect, or a 404 page for a challenge Hydra does not know (expired, or made up).
 */
export async function fetchChallenge<T>(
  res: Response,
  fetch: () => Promise<{ data: T }>,
  expired: { title: string; message: string },
): Promise<T | undefined> {
  try {
    return (await fetch()).data;
  } catch (error) {
    const redirectTo = goneRedirect(error);
    if (redirectTo) {
      res.redirect(303, redirectTo);
      return undefined;
    }
    if (oryStatus(error) === 404 || oryStatus(error) === 400) {
      res.status(404).type('html').send(errorPage(expired.title, expired.message));
      return undefined;
    }
    throw error;
  }
}

/** Accept or reject a challenge and send the browser on to where Hydra says, also after a 410. */
export async function answerChallenge(res: Response, answer: () => Promise<{ data: { redirect_to: string } }>): Promise<void> {
  let redirectTo: string;
  try {
    redirectTo = (await answer()).data.redirect_to;
  } catch (error) {
    const gone = goneRedirect(error);
    if (!gone) throw error;
    redirectTo = gone;
  }
  res.redirect(303, redirectTo);
}
