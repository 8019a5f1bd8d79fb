import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { exportJWK, generateKeyPair, importJWK, SignJWT, type JSONWebKeySet, type JWK } from 'jose';

/**
 * The development signing key: generated on first use under the data directory and used only when
 * no AUTH_JWKS_URL is configured (never in production). `npm run token` signs with it, the locally
 * started API verifies with its public half.
 */
export const DEV_ISSUER = 'urn:feature-mapping-platform:development';
const ALG = 'ES256';

export interface DevKeys {
  issuer: string;
  jwks: JSONWebKeySet;
  sign(claims: { sub: string; role?: string } & Record<string, unknown>, expiresIn?: string): Promise<string>;
}

interface StoredKey {
  kid: string;
  privateJwk: JWK;
  publicJwk: JWK;
}

async function readOrCreate(file: string): Promise<StoredKey> {
  try {
    return JSON.parse(await readFile(file, 'utf8')) as StoredKey;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  const { privateKey, publicKey } = await generateKeyPair(ALG, { extractable: true });
  const kid = `dev-${Date.now().toString(36)}`;
  const stored: StoredKey = { kid, privateJwk: await exportJWK(privateKey), publicJwk: { ...(await exportJWK(publicKey)), kid, alg: ALG, use: 'sig' } };
  try {
    // `wx`: if another process created the key meanwhile, keep theirs so both agree.
    await writeFile(file, JSON.stringify(stored), { mode: 0o600, flag: 'wx' });
    return stored;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return JSON.parse(await readFile(file, 'utf8')) as StoredKey;
    throw error;
  }
}

export async function loadOrCreateDevKeys(dataDir: string): Promise<DevKeys> {
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const stored = await readOrCreate(join(dataDir, 'dev-signing-key.json'));
  const privateKey = await importJWK(stored.privateJwk, ALG);
  return {
    issuer: DEV_ISSUER,
    jwks: { keys: [stored.publicJwk] },
    async sign(claims, expiresIn = '12h') {
      return new SignJWT(claims)
        .setProtectedHeader({ alg: ALG, kid: stored.kid, typ: 'JWT' })
        .setIssuer(DEV_ISSUER)
        .setSubject(claims.sub)
        .setIssuedAt()
        .setExpirationTime(expiresIn)
        .sign(privateKey);
    },
  };
}
