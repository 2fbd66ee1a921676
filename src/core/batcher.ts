// Collects items and writes them in one statement per short window, so completing N jobs costs
// one round trip instead of N. A failed write keeps its items and tries again.

export interface BatcherOptions<T> {
  flushMs: number;
  maxBatch: number;
  write: (items: T[]) => Promise<void>;
  onError: (err: unknown, items: T[]) => void;
}

export class Batcher<T> {
  private items: T[] = [];
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  private retryDelayMs = 0;

  constructor(private readonly options: BatcherOptions<T>) {}

  get pending(): number {
    return this.items.length;
  }

  push(item: T): void {
    this.items.push(item);
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
        this.items.unshift(...batch);
        this.retryDelayMs = Math.min(5000, Math.max(50, this.retryDelayMs * 2));
        this.options.onError(err, batch);
      }
    })();
    await this.flushing;
    this.flushing = undefined;
    if (this.items.length > 0 && !this.timer) {
      this.timer = setTimeout(() => void this.flush(), this.retryDelayMs || this.options.flushMs);
    }
  }

  /** Flush until empty, giving up after `deadlineMs` (the database may be gone). */
  async drain(deadlineMs: number): Promise<void> {
    const until = Date.now() + deadlineMs;
    while (this.items.length > 0 && Date.now() < until) {
      await this.flush();
      if (this.items.length > 0) await new Promise((r) => setTimeout(r, Math.min(this.retryDelayMs, Math.max(0, until - Date.now()))));
    }
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
