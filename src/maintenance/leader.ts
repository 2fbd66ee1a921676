// Leader election: a lease row with a TTL, renewed while held. Only maintenance needs a leader;
// relay and workers run everywhere. A plain row (no session advisory lock) works behind poolers.
import { performance } from 'node:perf_hooks';
import type { Clock } from '../core/clock.js';
import { errorMessage } from '../core/errors-format.js';
import type { Lifecycle } from '../core/lifecycle.js';
import type { Logger } from '../core/logger.js';
import type { Driver } from '../driver/types.js';

export class Leader {
  private timer: NodeJS.Timeout | undefined;
  private leading = false;
  /** The last election won: the row may name this process, so stop() gives it back. */
  private held = false;
  private started = false;
  private tick: Promise<void> | undefined;
  /** wake() came while an attempt ran: try again as soon as it ends. */
  private again = false;
  /**
   * Until when (performance.now()) the lease won last is surely ours: the TTL counted from when
   * that election was sent, since the database set its expiry no earlier. A renewal that waits
   * (for a pool connection its handlers hold, for a slow server) does not extend it: past it
   * another process may have taken the lease, and two leaders would run maintenance at once.
   */
  private validUntil = 0;
  private expiry: NodeJS.Timeout | undefined;

  constructor(
    private readonly driver: Driver,
    private readonly options: { leaderId: string; ttlMs: number; renewMs: number },
    private readonly deps: {
      clock: Clock; lifecycle: Lifecycle; log: Logger; onChange: (leading: boolean) => void;
      /** Tell the other processes the lease was given back (a NOTIFY), so one takes it now, not at its next renewal. */
      released?: () => Promise<void>;
    },
  ) {}

  get isLeader(): boolean {
    return this.leading && performance.now() < this.validUntil;
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
    clearTimeout(this.expiry);
    this.set(false);
    if (this.held) await this.resign();
  }

  /**
   * Another process gave the lease back: try for it now rather than at the next renewal, so
   * maintenance (and /healthz's "a leader was seen") goes on without a gap.
   */
  wake(): void {
    if (!this.started || this.leading) return;
    // An attempt on its way may have read the lease before it was given back: one more after it.
    if (this.tick) return void (this.again = true);
    clearTimeout(this.timer);
    this.schedule(0);
  }

  private schedule(ms: number): void {
    this.timer = setTimeout(() => {
      this.tick = this.attempt().finally(() => {
        this.tick = undefined;
        const again = this.again && !this.leading;
        this.again = false;
        if (this.started) this.schedule(again ? 0 : this.options.renewMs);
      });
    }, ms);
    this.timer.unref?.();
  }

  private async attempt(): Promise<void> {
    const sentAt = performance.now();
    try {
      const won = await this.driver.executor.leaderAttemptElect({ leaderId: this.options.leaderId, ttlMs: this.options.ttlMs, now: this.deps.clock.now() });
      this.held = won;
      if (this.started) {
        if (won) this.keepUntil(sentAt + this.options.ttlMs);
        this.set(won && performance.now() < this.validUntil);
      }
      // Stopped while this election ran and it won the lease: give it back now (stop() waits for
      // this tick), or every other process would wait out the TTL for a leader.
      else if (won) await this.resign();
    } catch (err) {
      this.deps.log.warn({ err: errorMessage(err) }, 'leader election failed');
      this.set(false); // cannot prove we still hold the lease
    }
  }

  /** End the lease now (see leaderResign) and say so; a failure leaves it to run out its TTL. */
  private async resign(): Promise<void> {
    this.held = false;
    try {
      await this.driver.executor.leaderResign({ leaderId: this.options.leaderId, now: this.deps.clock.now() });
    } catch {
      return;
    }
    await this.deps.released?.().catch(() => {});
  }

  /** Leading ends at `until` unless a renewal sent before then wins first. */
  private keepUntil(until: number): void {
    this.validUntil = until;
    clearTimeout(this.expiry);
    this.expiry = setTimeout(() => {
      if (!this.leading) return;
      // A timer may fire a fraction of a millisecond early by this clock.
      if (performance.now() < this.validUntil) return this.keepUntil(this.validUntil);
      this.deps.log.warn({ ttl_ms: this.options.ttlMs }, 'leader lease expired before a renewal came back; stepping down until one does');
      this.set(false);
    }, Math.max(0, until - performance.now()));
    this.expiry.unref?.();
  }

  private set(leading: boolean): void {
    if (leading === this.leading) return;
    this.leading = leading;
    this.deps.lifecycle.emit(leading ? 'leader:elected' : 'leader:lost', { leaderId: this.options.leaderId });
    this.deps.onChange(leading);
  }
}
