// The relay: claims unfanned events in rounds of at most batchSize, turns them into jobs and marks
// them fanned, in one statement. A failing round is retried row by row so one bad row is poisoned
// instead of blocking everything behind it.
import type { Clock } from '../core/clock.js';
import type { Lifecycle } from '../core/lifecycle.js';
import { PollLoop } from '../core/poll.js';
import type { Driver, WebhookFanOut } from '../driver/types.js';
import type { Logger } from '../core/logger.js';
import { errorMessage } from '../core/errors-format.js';

export interface RelayOptions {
  batchSize: number;
  minPollMs: number;
  maxPollMs: number;
  maxFanAttempts: number;
  /** Rounds run at once while rounds come back full (each still ≤ batchSize events). */
  concurrency: number;
  /** How webhook jobs are made; the executor's defaults when absent. */
  webhook?: WebhookFanOut;
}

export class Relay {
  private readonly loop: PollLoop;
  private readonly drainers = new Set<Promise<void>>();
  private running = false;

  constructor(
    private readonly driver: Driver,
    private readonly options: RelayOptions,
    private readonly deps: { lifecycle: Lifecycle; log: Logger; clock: Clock; onFanned: (jobs: number) => void },
  ) {
    this.loop = new PollLoop({
      minMs: options.minPollMs,
      maxMs: options.maxPollMs,
      round: async () => {
        const outcome = await this.round();
        if (outcome === 'full') this.spawnDrainers();
        return outcome;
      },
      onError: (err) => {
        deps.log.warn({ err: errorMessage(err) }, 'relay round failed');
        deps.lifecycle.emit('relay:error', { error: err as Error });
      },
    });
  }

  start(): void {
    this.running = true;
    this.loop.start();
  }

  wake(): void {
    this.loop.wake();
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.loop.stop();
    await Promise.all(this.drainers);
  }

  /**
   * A full round means a backlog: run extra rounds alongside the poll loop until rounds stop
   * coming back full. SKIP LOCKED keeps concurrent rounds on disjoint events.
   */
  private spawnDrainers(): void {
    while (this.running && this.drainers.size < this.options.concurrency - 1) {
      const drainer: Promise<void> = (async () => {
        try {
          while (this.running && (await this.round()) === 'full');
        } catch (err) {
          this.deps.log.warn({ err: errorMessage(err) }, 'relay round failed');
        }
      })().finally(() => this.drainers.delete(drainer));
      this.drainers.add(drainer);
    }
  }

  /** One round; exposed for tests and the CLI. */
  async round(): Promise<'full' | 'some' | 'none'> {
    let fanned: number;
    try {
      const result = await this.driver.executor.eventFanOut(this.driver, { limit: this.options.batchSize, now: this.deps.clock.now(), webhook: this.options.webhook });
      this.report(result.eventIds, result.jobs);
      fanned = result.eventIds.length;
    } catch (err) {
      if (this.driver.isTransientError(err)) throw err;
      this.deps.log.warn({ err: errorMessage(err) }, 'relay round failed; retrying its events one by one');
      fanned = await this.rowByRow();
    }
    if (fanned >= this.options.batchSize) return 'full';
    return fanned > 0 ? 'some' : 'none';
  }

  private async rowByRow(): Promise<number> {
    const ids = await this.driver.executor.eventListUnfanned({ limit: this.options.batchSize });
    let fanned = 0;
    for (const id of ids) {
      try {
        const result = await this.driver.executor.eventFanOut(this.driver, { limit: 1, onlyId: id, now: this.deps.clock.now(), webhook: this.options.webhook });
        this.report(result.eventIds, result.jobs);
        fanned += result.eventIds.length;
      } catch (err) {
        if (this.driver.isTransientError(err)) throw err;
        const message = errorMessage(err);
        const { poisoned } = await this.driver.executor.eventRecordFanFailure({
          id, error: message, maxFanAttempts: this.options.maxFanAttempts, now: this.deps.clock.now(),
        });
        if (poisoned) {
          this.deps.log.error({ event_id: id, err: message }, 'event poisoned: fan-out failed too many times; requeue it once fixed');
          this.deps.lifecycle.emit('relay:event:poisoned', { eventId: id, error: message });
        }
      }
    }
    return fanned;
  }

  private report(eventIds: string[], jobs: number): void {
    if (eventIds.length === 0) return;
    this.deps.lifecycle.emit('relay:batch:fanned', { eventIds, jobs });
    if (jobs > 0) this.deps.onFanned(jobs);
  }
}
