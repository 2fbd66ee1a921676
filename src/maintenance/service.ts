// The skeleton every maintenance service shares: a runOnce() that works in bounded batches, run
// every intervalMs while this process leads; start() and stop() may be called twice.
import { errorMessage } from '../core/errors-format.js';
import type { Logger } from '../core/logger.js';

export interface MaintenanceService {
  readonly name: string;
  readonly intervalMs: number;
  runOnce(): Promise<unknown>;
}

export class ServiceRunner {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;
  private started = false;

  constructor(private readonly service: MaintenanceService, private readonly log: Logger) {}

  start(): void {
    if (this.started) return;
    this.started = true;
    this.schedule(0);
  }

  async stop(): Promise<void> {
    this.started = false;
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
  }

  private schedule(ms: number): void {
    this.timer = setTimeout(async () => {
      if (!this.started) return;
      this.running = this.service.runOnce().catch((err) => this.log.warn({ err: errorMessage(err), service: this.service.name }, 'maintenance pass failed'));
      await this.running;
      this.running = undefined;
      if (this.started) this.schedule(this.service.intervalMs);
    }, ms);
    this.timer.unref?.();
  }
}
