// Leader election: a lease row with a TTL, renewed while held. Only maintenance needs a leader;
// relay and workers run everywhere. A plain row (no session advisory lock) works behind poolers.
import type { Clock } from '../core/clock.js';
import { errorMessage } from '../core/errors-format.js';
import type { Lifecycle } from '../core/lifecycle.js';
import type { Logger } from '../core/logger.js';
import type { Driver } from '../driver/types.js';

export class Leader {
  private timer: NodeJS.Timeout | undefined;
  private leading = false;
  private started = false;
  private tick: Promise<void> | undefined;

  constructor(
    private readonly driver: Driver,
    private readonly options: { leaderId: string; ttlMs: number; renewMs: number },
    private readonly deps: { clock: Clock; lifecycle: Lifecycle; log: Logger; onChange: (leading: boolean) => void },
  ) {}

  get isLeader(): boolean {
    return this.leading;
  }

  start(): void {
    if (this.started) return;
    this.started = true;
    this.schedule(0);
  }

  async stop(): Promise<void> {
    if (!this.started) return;
    this.started = false;
    clearTimeout(this.timer);
    await this.tick;
    if (this.leading) {
      this.set(false);
      await this.driver.executor.leaderResign({ leaderId: this.options.leaderId }).catch(() => {});
    }
  }

  private schedule(ms: number): void {
    this.timer = setTimeout(() => {
      this.tick = this.attempt().finally(() => {
        this.tick = undefined;
        if (this.started) this.schedule(this.options.renewMs);
      });
    }, ms);
    this.timer.unref?.();
  }

  private async attempt(): Promise<void> {
    try {
      const won = await this.driver.executor.leaderAttemptElect({ leaderId: this.options.leaderId, ttlMs: this.options.ttlMs, now: this.deps.clock.now() });
      if (this.started) this.set(won);
      // Stopped while this election ran and it won the lease: give it back now (stop() waits for
      // this tick), or every other process would wait out the TTL for a leader. A renewal (still
      // leading) is given back by stop() itself.
      else if (won && !this.leading) await this.driver.executor.leaderResign({ leaderId: this.options.leaderId }).catch(() => {});
    } catch (err) {
      this.deps.log.warn({ err: errorMessage(err) }, 'leader election failed');
      this.set(false); // cannot prove we still hold the lease
    }
  }

  private set(leading: boolean): void {
    if (leading === this.leading) return;
    this.leading = leading;
    this.deps.lifecycle.emit(leading ? 'leader:elected' : 'leader:lost', { leaderId: this.options.leaderId });
    this.deps.onChange(leading);
  }
}
