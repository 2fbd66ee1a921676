// The relay: claims unfanned events in rounds of at most batchSize, turns them into jobs and marks
// them fanned, in one statement. Handler jobs this process's worker has room for are inserted
// already claimed by it and handed over in memory (no claim statement). A failing round is
// retried row by row so one bad row is poisoned instead of blocking everything behind it.
import type { Clock } from '../core/clock.js';
import type { Lifecycle } from '../core/lifecycle.js';
import { PollLoop } from '../core/poll.js';
import type { ClaimedJob, Driver, FanOutHandOff, FanOutResult, WebhookFanOut } from '../driver/types.js';
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

/** This process's worker, when it runs: a round's handler jobs go to it without a claim. */
export interface HandOffTarget {
  reserveHandOff(): FanOutHandOff | null;
  acceptHandOff(reservation: FanOutHandOff, jobs: ClaimedJob[]): void;
}

export class Relay {
  private readonly loop: PollLoop;
  private readonly drainers = new Set<Promise<void>>();
  private running = false;
  /** The last round was full and queued jobs: no hand-off until a round is not full. */
  private backlogged = false;

  constructor(
    private readonly driver: Driver,
    private readonly options: RelayOptions,
    private readonly deps: {
      lifecycle: Lifecycle; log: Logger; clock: Clock;
      /** Jobs were inserted that no worker holds yet (`queued` of them). */
      onFanned: (queued: number) => void;
      handOff?: HandOffTarget;
    },
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
    const reservation = this.backlogged ? undefined : this.deps.handOff?.reserveHandOff() ?? undefined;
    let result: FanOutResult;
    try {
      result = await this.driver.executor.eventFanOut(this.driver, {
        limit: this.options.batchSize, now: this.deps.clock.now(), webhook: this.options.webhook, handOff: reservation,
      });
    } catch (err) {
      // The reservation ends empty. Had the statement committed before its reply was lost, its
      // handed-off jobs sit running under this worker's id until their lease expires and the
      // rescuer returns them, as for a claim whose reply was lost.
      if (reservation) this.deps.handOff!.acceptHandOff(reservation, []);
      if (this.driver.isTransientError(err)) throw err;
      this.deps.log.warn({ err: errorMessage(err) }, 'relay round failed; retrying its events one by one');
      return this.outcome(await this.rowByRow());
    }
    if (reservation) this.deps.handOff!.acceptHandOff(reservation, result.handedOff);
    this.report(result.eventIds, result.jobs, result.handedOff.length);
    const outcome = this.outcome(result.eventIds.length);
    // A full round that left jobs in the queue means a backlog: its jobs wait for claims, and no
    // later job may overtake them, so offering room would only withhold it from the worker's own
    // claims. Offer again once rounds stop coming back full.
    this.backlogged = outcome === 'full' && result.jobs > result.handedOff.length;
    return outcome;
  }

  private outcome(fanned: number): 'full' | 'some' | 'none' {
    if (fanned >= this.options.batchSize) return 'full';
    return fanned > 0 ? 'some' : 'none';
  }

  private async rowByRow(): Promise<number> {
    const ids = await this.driver.executor.eventListUnfanned({ limit: this.options.batchSize });
    let fanned = 0;
    for (const id of ids) {
      try {
        const result = await this.driver.executor.eventFanOut(this.driver, { limit: 1, onlyId: id, now: this.deps.clock.now(), webhook: this.options.webhook });
        this.report(result.eventIds, result.jobs, 0);
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

  private report(eventIds: string[], jobs: number, handedOff: number): void {
    if (eventIds.length === 0) return;
    this.deps.lifecycle.emit('relay:batch:fanned', { eventIds, jobs, handedOff });
    if (jobs > handedOff) this.deps.onFanned(jobs - handedOff);
  }
}
