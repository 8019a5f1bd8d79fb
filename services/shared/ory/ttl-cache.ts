import { LRUCache } from 'lru-cache';

/**
 * A small bounded cache with a per-entry expiry and single-flight loading: concurrent lookups of the same
 * key share one upstream call (a page load firing ten API requests asks Kratos once, not ten times).
 * Keys should be hashes, never raw credentials, so a heap dump holds no usable cookie or token.
 */
export class TtlCache<V> {
  /**
   * Read only with `peek`, so the entry set longest ago is the first dropped when full. Not a Map
   * trimmed with `keys().next()`: V8 keeps deleted entries as holes until it rebuilds the table, and
   * each trim walked past them all, which a flood of distinct unknown credentials (cached too, as
   * anonymous or inactive) would make the cost of every request.
   */
  private readonly entries: LRUCache<string, { value: V; expiresAt: number }>;
  private readonly inFlight = new Map<string, Promise<{ value: V; expiresAt: number }>>();

  constructor(
    private readonly maxEntries: number,
    private readonly now: () => number,
  ) {
    this.entries = new LRUCache({ max: Math.max(1, maxEntries) });
  }

  get size(): number {
    return this.entries.size;
  }

  async getOrLoad(key: string, load: () => Promise<{ value: V; expiresAt: number }>): Promise<V> {
    const hit = this.entries.peek(key);
    if (hit && hit.expiresAt > this.now()) return hit.value;
    if (hit) this.entries.delete(key);
    let pending = this.inFlight.get(key);
    if (!pending) {
      pending = load().finally(() => this.inFlight.delete(key));
      this.inFlight.set(key, pending);
    }
    const loaded = await pending;
    // maxEntries 0 caches nothing, as before (lru-cache needs a bound of at least 1).
    if (this.maxEntries > 0 && loaded.expiresAt > this.now()) this.entries.set(key, loaded);
    return loaded.value;
  }

  delete(key: string): void {
    this.entries.delete(key);
  }
}
