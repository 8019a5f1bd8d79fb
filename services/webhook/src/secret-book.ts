/**
 * The accepted secrets of every target, swappable at runtime (SIGHUP reload during a rotation)
 * without restarting the server or dropping a request.
 */
import type { Target } from '../../shared/targets.js';
import type { TargetSecretMap } from './secrets.js';

export class SecretBook {
  constructor(private secrets: TargetSecretMap) {}

  secretsOf(target: Pick<Target, 'key'>): readonly string[] {
    return this.secrets.get(target.key) ?? [];
  }

  replace(secrets: TargetSecretMap): void {
    this.secrets = secrets;
  }
}
