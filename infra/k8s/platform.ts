import type { BackupOffsite } from '../config.js';
import type { K8sNamespaces } from './network.js';
import type { backupCredentials } from './postgres.js';

/** What the parts share besides the context: the namespaces and the backups' object store. */
export interface K8sPlatform {
  namespaces: K8sNamespaces;
  backup: BackupOffsite;
  backupCredentials: ReturnType<typeof backupCredentials>;
}
