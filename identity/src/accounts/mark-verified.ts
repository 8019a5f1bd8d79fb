import type { Identity, IdentityApi, JsonPatch } from '@ory/kratos-client';

/**
 * Existing accounts and the verified-e-mail rule (docs/identity.md, "Verified e-mail before editing").
 *
 * The API lets an identity whose e-mail address is not verified only read. Accounts made before that
 * rule could edit with an address nobody confirmed; so that they are not locked out by surprise on the
 * day of the upgrade, the operator marks the addresses of the identities created before a cut-off as
 * verified (they were trusted until then), through Kratos' admin API. Accounts created later verify as
 * usual, by the code Kratos mails.
 */

export interface MarkVerifiedOptions {
  identity: Pick<IdentityApi, 'listIdentities' | 'patchIdentity'>;
  /** Only identities created before this instant (the upgrade): newer ones must verify themselves. */
  createdBefore: Date;
  dryRun?: boolean;
  /** One line per identity changed: its id and how many addresses (never the address itself). */
  log?: (line: string) => void;
  pageSize?: number;
}

export interface MarkVerifiedResult {
  checked: number;
  marked: number;
}

/** The JSON Patch that marks an identity's unverified e-mail addresses verified, or [] when none is. */
export function verificationPatch(identity: Pick<Identity, 'verifiable_addresses'>): JsonPatch[] {
  return (identity.verifiable_addresses ?? []).flatMap((address, i) =>
    address.via === 'email' && !address.verified
      ? [
          { op: 'replace' as const, path: `/verifiable_addresses/${i}/verified`, value: true },
          { op: 'replace' as const, path: `/verifiable_addresses/${i}/status`, value: 'completed' },
        ]
      : [],
  );
}

/** The page_token of the rel="next" link Kratos sends with a page of identities. */
export function nextPageToken(link: string | undefined): string | undefined {
  for (const part of (link ?? '').split(',')) {
    if (!/rel="?next"?/.test(part)) continue;
    const target = /<([^>]+)>/.exec(part)?.[1];
    if (!target) continue;
    const token = new URL(target, 'http://kratos').searchParams.get('page_token');
    if (token) return token;
  }
  return undefined;
}

export async function markExistingAddressesVerified(options: MarkVerifiedOptions): Promise<MarkVerifiedResult> {
  const result: MarkVerifiedResult = { checked: 0, marked: 0 };
  const cutoff = options.createdBefore.getTime();
  let pageToken: string | undefined;
  do {
    const response = await options.identity.listIdentities({ pageSize: options.pageSize ?? 250, ...(pageToken ? { pageToken } : {}) });
    for (const identity of response.data) {
      result.checked++;
      const created = identity.created_at ? Date.parse(identity.created_at) : Number.NaN;
      if (!(created < cutoff)) continue;
      const patch = verificationPatch(identity);
      if (patch.length === 0) continue;
      if (!options.dryRun) await options.identity.patchIdentity({ id: identity.id, jsonPatch: patch });
      result.marked++;
      options.log?.(`${options.dryRun ? 'would mark' : 'marked'} ${identity.id}: ${patch.length / 2} address(es) verified`);
    }
    const link = (response.headers as Record<string, string | undefined>).link;
    pageToken = response.data.length > 0 ? nextPageToken(link) : undefined;
  } while (pageToken);
  return result;
}
