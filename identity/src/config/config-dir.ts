import { fileURLToPath } from 'node:url';

/**
 * identity/config: the Kratos and Hydra templates, clients.yaml, the identity schema and the social
 * sign-in mappers. Found relative to this file, so the same path holds in the checkout and in the image
 * (which copies identity/ whole). The renderer in services/shared takes this folder from its caller.
 */
export const CONFIG_DIR = fileURLToPath(new URL('../../config/', import.meta.url));
