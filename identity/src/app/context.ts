import type { Logger } from 'pino';
import type { OryClients } from '../../../services/shared/ory/clients.js';
import type { IdentityAppConfig } from './config.js';

/** What every route factory receives: the Ory clients, the parsed config, a logger and a clock. */
export interface RouteContext {
  ory: OryClients;
  config: IdentityAppConfig;
  logger: Logger;
  now: () => number;
  csrfToken: (req: import('express').Request, res: import('express').Response) => string;
}
