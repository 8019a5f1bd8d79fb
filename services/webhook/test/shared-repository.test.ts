/**
 * A team's hook secret does not keep other teams out when the teams share a repository: the git host
 * signs every push with every hook's secret, so whoever may push `feature/team-de2/x` deploys to de2.
 * The webhook says so at start for each prefix target that shares its repository, naming what the git
 * host must enforce; targets with repositories of their own get no warning.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { sharedRepositoryWarnings, type Target } from '../../shared/targets.js';
import { githubSignature, pushPayload, send, startHarness, type Harness } from './support/webhook-harness.js';

const harnesses: Harness[] = [];
afterAll(async () => {
  for (const h of harnesses) await h.close();
});

describe('teams sharing a repository', () => {
  it("a push to another team's prefix, signed with that team's hook secret as the git host signs it, deploys there: only the git host's branch permissions stand between", async () => {
    const h = await startHarness();
    harnesses.push(h);
    // One repository, one hook per team: the git host sends this push to de2's hook with de2's secret,
    // whoever pushed it; the webhook cannot tell a de1 member from a de2 member.
    const payload = pushPayload('feature/team-de2/from-someone-in-de1');
    const response = await send(h.url, JSON.stringify(payload), {
      headers: { 'x-github-event': 'push', 'x-hub-signature-256': githubSignature(JSON.stringify(payload), h.secrets.SECRET_TEAM_DE2!) },
    });
    expect(response.status).toBe(202);
    // …so the webhook warns at start, for each prefix target of the shared repository.
    const warnings = h
      .logs()
      .split('\n')
      .filter((line) => line.includes('"check":"shared-repository"'))
      .map((line) => (JSON.parse(line) as { msg: string }).msg);
    expect(warnings).toHaveLength(3);
    expect(warnings.find((w) => w.startsWith('feature/team-de2 '))).toMatch(/whoever may push feature\/team-de2\/… there deploys to feature\/team-de2\. Protect feature\/team-de2\/\* on the git host/);
  });

  it('warns for no target that has a repository of its own, nor for exact targets', () => {
    const target = (key: string, repo: string, matchPattern: Target['matchPattern']) => ({ key, repo, matchPattern });
    expect(sharedRepositoryWarnings([target('main', 'r', 'exact'), target('develop', 'r', 'exact'), target('feature/a', 'ra', 'prefix'), target('feature/b', 'rb', 'prefix')])).toEqual([]);
    expect(sharedRepositoryWarnings([target('main', 'r', 'exact'), target('feature/a', 'r', 'prefix')])).toHaveLength(1);
  });
});
