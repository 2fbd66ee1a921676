// An adaptive poll loop: run a round, then wait a few ms while rounds find work, doubling the
// wait up to a ceiling while they don't. wake() cuts the wait short.

/** The wait after a round's first failure in a row; it doubles with each one after, up to maxMs. */
export const ERROR_RETRY_MS = 50;

export interface PollLoopOptions {
  minMs: number;
  maxMs: number;
  /**
   * One round; returns 'full' to run again at once, 'some' when it found work, 'none' when idle.
   * `woken`: wake() asked for this round (there is likely work), rather than the timer.
   */
  round: (context: { woken: boolean }) => Promise<'full' | 'some' | 'none'>;
  onError: (err: unknown) => void;
}

export class PollLoop {
  private running = false;
  private wakeRequested = false;
  private wakeUp: (() => void) | undefined;
  private timer: NodeJS.Timeout | undefined;
  private done: Promise<void> | undefined;
  private intervalMs: number;
  /** Rounds failed in a row. */
  private failures = 0;

  constructor(private readonly options: PollLoopOptions) {
    this.intervalMs = options.minMs;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.done = this.loop();
  }

  wake(): void {
    this.wakeRequested = true;
    this.intervalMs = this.options.minMs;
    this.wakeUp?.();
  }

  async stop(): Promise<void> {
    if (!this.running) return this.done;
    this.running = false;
    this.wakeUp?.();
    await this.done;
  }

  private async loop(): Promise<void> {
    while (this.running) {
      const woken = this.wakeRequested;
      this.wakeRequested = false;
      let outcome: 'full' | 'some' | 'none' = 'none';
      try {
        outcome = await this.options.round({ woken });
        this.failures = 0;
      } catch (err) {
        this.options.onError(err);
        // Back off on errors, from ERROR_RETRY_MS whatever the idle wait had grown to: a database
        // that is down should not be hammered, and one failure (a connection a failover killed,
        // dropped by now) should not cost an idle loop its whole maxMs before it tries again.
        this.intervalMs = Math.min(this.options.maxMs, ERROR_RETRY_MS * 2 ** Math.min(this.failures++, 20));
      }
      if (!this.running) break;
      if (outcome === 'full') {
        this.intervalMs = this.options.minMs;
        continue;
      }
      if (outcome === 'some') this.intervalMs = this.options.minMs;
      if (this.wakeRequested) continue;
      await this.sleep(this.intervalMs);
      if (outcome === 'none') this.intervalMs = Math.min(this.options.maxMs, Math.max(1, this.intervalMs * 2));
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const finish = () => {
        clearTimeout(this.timer);
        this.wakeUp = undefined;
        resolve();
      };
      this.wakeUp = finish;
      this.timer = setTimeout(finish, ms);
    });
  }
}
