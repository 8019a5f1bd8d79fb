/**
 * A small bounded cache with a per-entry expiry and single-flight loading: concurrent lookups of the same
 * key share one upstream call (a page load firing ten API requests asks Kratos once, not ten times).
 * Keys should be hashes, never raw credentials, so a heap dump holds no usable cookie or token.
 */
export class TtlCache<V> {
  private readonly entries = new Map<string, { value: V; expiresAt: number }>();
  private readonly inFlight = new Map<string, Promise<{ value: V; expiresAt: number }>>();

  constructor(
    private readonly maxEntries: number,
    private readonly now: () => number,
  ) {}

  get size(): number {
    return this.entries.size;
  }

  async getOrLoad(key: string, load: () => Promise<{ value: V; expiresAt: number }>): Promise<V> {
    const hit = this.entries.get(key);
    if (hit && hit.expiresAt > this.now()) return hit.value;
    if (hit) this.entries.delete(key);
    let pending = this.inFlight.get(key);
    if (!pending) {
      pending = load().finally(() => this.inFlight.delete(key));
      this.inFlight.set(key, pending);
    }
    const loaded = await pending;
    if (loaded.expiresAt > this.now()) this.set(key, loaded);
    return loaded.value;
  }

  delete(key: string): void {
    this.entries.delete(key);
  }

  private set(key: string, entry: { value: V; expiresAt: number }): void {
    this.entries.delete(key);
    this.entries.set(key, entry);
    // Map keeps insertion order: the first key is the oldest.
    while (this.entries.size > this.maxEntries) this.entries.delete(this.entries.keys().next().value as string);
  }
}
