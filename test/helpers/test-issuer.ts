import { createServer } from 'node:http';
import { exportJWK, generateKeyPair, SignJWT, type JWK, type CryptoKey } from 'jose';
import { closeGracefully, listen } from '../../services/shared/http-server.js';

export interface TestIssuer {
  issuer: string;
  jwksUrl: string;
  /** Sign a token with the current key (RS256). */
  sign(claims: { sub: string; role?: string; ext?: Record<string, unknown> } & Record<string, unknown>, options?: { expiresIn?: string | number; audience?: string; issuer?: string }): Promise<string>;
  /** A fresh key becomes current and is published next to the old one, as an issuer rotating keys does. */
  rotate(): Promise<void>;
  /** Stop publishing every key but the current one. */
  retireOldKeys(): void;
  /** How many times the JWKS was fetched (to prove caching). */
  readonly jwksFetches: number;
  close(): Promise<void>;
}

interface Key {
  kid: string;
  privateKey: CryptoKey;
  publicJwk: JWK;
}

async function newKey(): Promise<Key> {
  const { privateKey, publicKey } = await generateKeyPair('RS256');
  const kid = `k-${Math.random().toString(36).slice(2, 10)}`;
  return { kid, privateKey, publicJwk: { ...(await exportJWK(publicKey)), kid, alg: 'RS256', use: 'sig' } };
}

/** A real OpenID-style issuer on 127.0.0.1:0 that publishes its JWKS over HTTP. */
export async function startTestIssuer(): Promise<TestIssuer> {
  let keys: Key[] = [await newKey()];
  let fetches = 0;
  const server = createServer((req, res) => {
    if (req.url === '/.well-known/jwks.json') {
      fetches++;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ keys: keys.map((k) => k.publicJwk) }));
      return;
    }
    res.writeHead(404).end();
  });
  const port = await listen(server, 0, '127.0.0.1');
  const issuer = `http://127.0.0.1:${port}/`;
  return {
    issuer,
    jwksUrl: `http://127.0.0.1:${port}/.well-known/jwks.json`,
    get jwksFetches() {
      return fetches;
    },
    async sign(claims, options = {}) {
      const current = keys[keys.length - 1]!;
      let jwt = new SignJWT(claims)
        .setProtectedHeader({ alg: 'RS256', kid: current.kid })
        .setIssuer(options.issuer ?? issuer)
        .setSubject(claims.sub)
        .setIssuedAt()
        .setExpirationTime(options.expiresIn ?? '10m');
      if (options.audience) jwt = jwt.setAudience(options.audience);
      return jwt.sign(current.privateKey);
    },
    async rotate() {
      keys = [...keys, await newKey()];
    },
    retireOldKeys() {
      keys = keys.slice(-1);
    },
    close: () => closeGracefully(server, 100),
  };
}
