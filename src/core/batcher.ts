// Collects items and writes them in one statement per short window, so completing N jobs costs
// one round trip instead of N. A failed write keeps its items and tries again (with `isolate`, except
// an item the database refuses on its own).

export interface BatcherOptions<T> {
  flushMs: number;
  maxBatch: number;
  write: (items: T[]) => Promise<void>;
  onError: (err: unknown, items: T[]) => void;
  /**
   * For items that can be refused on their own merits (a value the database will not store).
   * When a write fails with an error that is not transient, the items are written one at a time
   * and each one refused alone goes to `onRefused` instead of back into the queue, so one bad
   * item cannot hold back every later one. Transient errors (the database is away) keep all items.
   */
  isolate?: { isTransient: (err: unknown) => boolean; onRefused: (item: T, err: unknown) => void };
}

export class Batcher<T> {
  private items: T[] = [];
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  private retryDelayMs = 0;
  /**
   * Set by drain(): no timer of its own any more. A write still in flight when drain() gave up (a
   * statement waiting on a lock) would otherwise re-arm its retry once it failed on the closed
   * pool, every few seconds for ever, and keep the process from exiting.
   */
  private drained = false;

  constructor(private readonly options: BatcherOptions<T>) {}

  get pending(): number {
    return this.items.length;
  }

  push(item: T): void {
    this.items.push(item);
    if (this.drained) return;
    if (this.items.length >= this.options.maxBatch && !this.flushing) {
      void this.flush();
    } else if (!this.timer && !this.flushing) {
      this.timer = setTimeout(() => void this.flush(), this.retryDelayMs || this.options.flushMs);
    }
  }

  /** Write everything pending now; resolves once written (or once a write failed). */
  async flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.flushing) await this.flushing;
    if (this.items.length === 0) return;
    const batch = this.items.splice(0, this.options.maxBatch);
    this.flushing = (async () => {
      try {
        await this.options.write(batch);
        this.retryDelayMs = 0;
      } catch (err) {
        const { isolate } = this.options;
        const kept = isolate && !isolate.isTransient(err) ? await this.oneByOne(batch, err, isolate) : batch;
        if (kept.length === 0) {
          this.retryDelayMs = 0;
          return;
        }
        this.items.unshift(...kept);
        this.retryDelayMs = Math.min(5000, Math.max(50, this.retryDelayMs * 2));
        this.options.onError(err, kept);
      }
    })();
    await this.flushing;
    this.flushing = undefined;
    if (this.items.length > 0 && !this.timer && !this.drained) {
      this.timer = setTimeout(() => void this.flush(), this.retryDelayMs || this.options.flushMs);
    }
  }

  /** Writes `batch` item by item after `err` refused it whole; returns what must be tried again. */
  private async oneByOne(batch: T[], err: unknown, isolate: NonNullable<BatcherOptions<T>['isolate']>): Promise<T[]> {
    if (batch.length === 1) {
      isolate.onRefused(batch[0]!, err);
      return [];
    }
    for (let i = 0; i < batch.length; i++) {
      try {
        await this.options.write([batch[i]!]);
      } catch (itemErr) {
        if (isolate.isTransient(itemErr)) return batch.slice(i); // the database went away meanwhile
        isolate.onRefused(batch[i]!, itemErr);
      }
    }
    return [];
  }

  /** Flush until empty, giving up after `deadlineMs` (the database may be gone); then arm no more timers. */
  async drain(deadlineMs: number): Promise<void> {
    const until = Date.now() + deadlineMs;
    // A write in flight holds its items out of `items`: waited for (within the deadline: it may
    // wait on a lock), so what it fails on is tried again below instead of handed back to a
    // batcher that no longer writes.
    if (this.flushing) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([this.flushing, new Promise((r) => (timer = setTimeout(r, deadlineMs)))]);
      clearTimeout(timer);
    }
    while (this.items.length > 0 && Date.now() < until) {
      await this.flush();
      if (this.items.length > 0) await new Promise((r) => setTimeout(r, Math.min(this.retryDelayMs, Math.max(0, until - Date.now()))));
    }
    this.drained = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
