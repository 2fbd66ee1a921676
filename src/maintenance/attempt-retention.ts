// Keeps the webhook attempt log bounded: deletes attempts older than the retention window
// (default 7 days) in bounded batches, oldest first.
import type { Clock } from '../core/clock.js';
import type { Lifecycle } from '../core/lifecycle.js';
import type { Driver } from '../driver/types.js';
import type { MaintenanceService } from './service.js';

export interface AttemptRetentionOptions {
  intervalMs: number;
  olderThanMs: number;
  batchSize: number;
  /** Pause between two full batches, leaving room for the hot path. */
  pauseMs: number;
}

export class AttemptRetention implements MaintenanceService {
  readonly name = 'webhook-attempt-retention';
  readonly intervalMs: number;

  constructor(
    private readonly driver: Driver,
    private readonly options: AttemptRetentionOptions,
    private readonly deps: {
      clock: Clock; lifecycle: Lifecycle;
      /** Checked between batches: a pass stops early once this process stops leading (or stops). */
      keepGoing: () => boolean;
    },
  ) {
    this.intervalMs = options.intervalMs;
  }

  async runOnce(): Promise<{ deleted: number }> {
    let deleted = 0;
    for (;;) {
      const n = await this.driver.webhooks.attemptDeleteOlder({
        olderThanMs: this.options.olderThanMs, limit: this.options.batchSize, now: this.deps.clock.now(),
      });
      deleted += n;
      if (n < this.options.batchSize || !this.deps.keepGoing()) break;
      await new Promise((r) => setTimeout(r, this.options.pauseMs));
      if (!this.deps.keepGoing()) break;
    }
    if (deleted > 0) this.deps.lifecycle.emit('webhook:attempts:deleted', { deleted });
    return { deleted };
  }
}
