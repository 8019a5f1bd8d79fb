/**
 * DEPLOY_BUILD_SANDBOX in the webhook server's configuration: production never builds outside a
 * sandbox (none is refused at start, naming the variable; unset means auto), and the choice reaches
 * the deploy script's environment, together with the sandbox's limits from the allow-list.
 */
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../shared/config.js';
import { loadWebhookConfig } from '../src/config.js';
import { launcherPlan } from '../src/deployments/invocation.js';

const base = { PATH: '/usr/bin:/bin' };

describe('DEPLOY_BUILD_SANDBOX (webhook configuration)', () => {
  it('production refuses none, naming the variable', () => {
    expect(() => loadWebhookConfig({ ...base, NODE_ENV: 'production', DEPLOY_BUILD_SANDBOX: 'none' })).toThrow(ConfigError);
    expect(() => loadWebhookConfig({ ...base, NODE_ENV: 'production', DEPLOY_BUILD_SANDBOX: 'none' })).toThrow(/DEPLOY_BUILD_SANDBOX/);
  });

  it('production without the variable builds in the sandbox auto finds', () => {
    expect(loadWebhookConfig({ ...base, NODE_ENV: 'production' }).deploy.env.DEPLOY_BUILD_SANDBOX).toBe('auto');
  });

  it('an unknown value stops the start, naming the variable', () => {
    expect(() => loadWebhookConfig({ ...base, DEPLOY_BUILD_SANDBOX: 'chroot' })).toThrow(/DEPLOY_BUILD_SANDBOX/);
  });

  it('development keeps the script\'s default (none) unless told, and passes a choice and the limits on to every target', () => {
    expect(loadWebhookConfig(base).deploy.env.DEPLOY_BUILD_SANDBOX).toBeUndefined();
    const config = loadWebhookConfig({ ...base, DEPLOY_BUILD_SANDBOX: 'bwrap', DEPLOY_BUILD_TIMEOUT_SECONDS: '300', DEPLOY_BUILD_PROXY_SOCKET: '/run/build-proxy/npm.sock', SECRET_MAIN: 'x' });
    const plan = launcherPlan(config.deploy, config.targets);
    for (const target of Object.values(plan.targets)) {
      expect(target.env).toMatchObject({ DEPLOY_BUILD_SANDBOX: 'bwrap', DEPLOY_BUILD_TIMEOUT_SECONDS: '300', DEPLOY_BUILD_PROXY_SOCKET: '/run/build-proxy/npm.sock' });
      expect(target.env).not.toHaveProperty('SECRET_MAIN');
    }
  });
});
