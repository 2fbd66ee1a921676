// The relay: claims unfanned events in rounds of at most batchSize, turns them into jobs and marks
// them fanned, in one statement. Handler jobs this process's worker has room for are inserted
// already claimed by it and handed over in memory (no claim statement). A failing round is
// retried row by row so one bad row is poisoned instead of blocking everything behind it.
//
// Inline delivery (inlineMs > 0, on drivers that can): a round hands this process's plain
// handlers their jobs without inserting them, marks its events fanned and delivered to those
// handlers, and keeps its transaction open while the worker runs them, for at most inlineMs. Then,
// in the same transaction, the jobs that did not succeed (failed, still running, not started) get
// rows and their events lose those handlers from delivered_inline; a round where all succeeded
// just commits. A crash before COMMIT stores nothing of the round, so its events are delivered again.
import type { Clock } from '../core/clock.js';
import type { Lifecycle } from '../core/lifecycle.js';
import { PollLoop } from '../core/poll.js';
import type { ClaimedJob, Driver, FanOutHandOff, FanOutResult, InlineJob, InlineJobRow, WebhookFanOut } from '../driver/types.js';
import type { InlineRound } from '../worker/inline.js';
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
  /** Longest a round waits for its inline deliveries; 0: no inline delivery. */
  inlineMs: number;
}

/** This process's worker, when it runs: a round's handler jobs go to it without a claim. */
export interface HandOffTarget {
  reserveHandOff(inline?: { limit: number }): FanOutHandOff | null;
  /** leasedAt: when the handed-off jobs' lease began (performance.now()), no later than the statement's now(). */
  acceptHandOff(reservation: FanOutHandOff, jobs: ClaimedJob[], leasedAt?: number): void;
}

/** The worker's side of an inline round (see Worker.startInline). */
export interface InlineTarget extends HandOffTarget {
  readonly workerId: string;
  /** Jobs handed off by a round that has committed; leasedAt: when their lease began (performance.now()). */
  handOver(jobs: ClaimedJob[], leasedAt: number): void;
  /** leasedAt: when the round began (performance.now()); a job still running at its end is leased from then. */
  startInline(jobs: InlineJob[], leasedAt: number): InlineRound;
  /** The rows the round's unfinished jobs get, and for each of their events the handlers it was delivered to. */
  closeInline(round: InlineRound): { rows: InlineJobRow[]; delivered: Map<string, string[]> };
  /** retryAt: when the round's retryable rows are due, as eventInlineFinish stored them. */
  endInline(round: InlineRound, committed: boolean, retryAt?: ReadonlyMap<string, Date>): void;
}

/** How long the server lets an inline round's transaction sit idle before it ends it (a frozen process). */
const inlineIdleLimitMs = (inlineMs: number) => Math.max(10_000, inlineMs * 10);

/**
 * After an inline round the lean statement did not apply to (its events route to webhooks, to
 * handlers this process does not run inline, …), this many rounds go straight to the full one
 * before the lean one is tried again: a mixed workload pays one extra claim in that many rounds.
 */
export const LEAN_RETRY_ROUNDS = 16;

/**
 * A commit seen while an inline round has waited this long for its deliveries (a slow handler
 * keeps it open, for up to inlineMs) and then for its COMMIT (a WAL flush slowed by a
 * checkpoint's writes), or while the idle probe has been in flight this long (a database that
 * stalls), gets a round of its own beside it, within `concurrency`, instead of waiting for it to
 * end. Most inline rounds wait, and most probes take, well under a millisecond. Not a round still
 * in its statement: it may not have taken its snapshot yet, and then it takes the commit's events
 * itself.
 */
export const ROUND_BESIDE_AFTER_MS = 5;

export class Relay {
  private readonly loop: PollLoop;
  private readonly drainers = new Set<Promise<void>>();
  /** Inline rounds waiting for their deliveries; stop() ends their waits. */
  private readonly waiting = new Set<InlineRound>();
  /**
   * What a commit seen now would otherwise wait for, and since when (performance.now()): inline
   * rounds from the start of their wait for deliveries until their COMMIT is answered, and the
   * idle probe in flight.
   */
  private readonly slow = new Map<object, number>();
  private readonly probe = {};
  /** Set while a commit seen during a short wait is to be looked at again (roundBesideWaiting). */
  private besideTimer: NodeJS.Timeout | undefined;
  /**
   * A commit seen while a round waited found every round beside it taken (by rounds that had
   * claimed their events before it): the first of them to end looks again. Cleared by any round
   * that starts, which sees the commit's events.
   */
  private besideMissed = false;
  private stopping = false;
  private running = false;
  /** The last round was full and queued jobs: no hand-off until a round is not full. */
  private backlogged = false;
  /**
   * The last round left nothing behind it (it was not full, or none ran yet): an inline round the
   * timer starts first asks whether there is an event. Only a full round, or a wake-up, goes straight to one.
   */
  private drained = true;
  /** Inline rounds left before the lean statement is tried again (see LEAN_RETRY_ROUNDS). */
  private leanPause = 0;
  /** Set from start() until the poll loop's first round has ended. */
  private firstRoundEnded: (() => void) | undefined;

  constructor(
    private readonly driver: Driver,
    private readonly options: RelayOptions,
    private readonly deps: {
      lifecycle: Lifecycle; log: Logger; clock: Clock;
      /** Jobs were inserted that no worker holds yet (`queued` of them). */
      onFanned: (queued: number) => void;
      handOff?: HandOffTarget | InlineTarget;
    },
  ) {
    this.loop = new PollLoop({
      minMs: options.minPollMs,
      maxMs: options.maxPollMs,
      round: async ({ woken }) => {
        try {
          const outcome = await this.round({ woken });
          if (outcome === 'full') this.spawnDrainers();
          return outcome;
        } finally {
          this.firstRoundEnded?.();
          this.firstRoundEnded = undefined;
        }
      },
      onError: (err) => this.roundFailed(err),
    });
  }

  /** Resolves once the first round has ended, whatever it came to (see Worker.startClaims). */
  start(): Promise<void> {
    this.running = true;
    this.stopping = false;
    const first = new Promise<void>((resolve) => (this.firstRoundEnded = resolve));
    this.loop.start();
    return first;
  }

  wake(): void {
    this.loop.wake();
    this.roundBesideWaiting();
  }

  /**
   * A commit was seen: if an inline round has waited ROUND_BESIDE_AFTER_MS for its deliveries and
   * its COMMIT, or the idle probe has been in flight that long (a database that stalls), run a
   * round beside it now (SKIP LOCKED keeps it on other events: the ones just committed); if one
   * waits but not that long yet, look again when it will have.
   */
  private roundBesideWaiting(): void {
    if (this.slow.size === 0 || this.besideTimer) return;
    const waited = performance.now() - Math.min(...this.slow.values());
    if (waited >= ROUND_BESIDE_AFTER_MS) {
      if (!this.spawnRound(true)) this.besideMissed = true;
      return;
    }
    this.besideTimer = setTimeout(() => {
      this.besideTimer = undefined;
      this.roundBesideWaiting();
    }, ROUND_BESIDE_AFTER_MS - waited);
    this.besideTimer.unref?.();
  }

  async stop(): Promise<void> {
    clearTimeout(this.besideTimer);
    this.besideTimer = undefined;
    this.running = false;
    this.stopping = true;
    for (const round of this.waiting) round.stopWaiting();
    await this.loop.stop();
    this.firstRoundEnded?.();
    this.firstRoundEnded = undefined;
    await Promise.all(this.drainers);
  }

  /**
   * A full round means a backlog: run extra rounds alongside the poll loop until rounds stop
   * coming back full. SKIP LOCKED keeps concurrent rounds on disjoint events.
   */
  private spawnDrainers(): void {
    while (this.spawnRound(false));
  }

  /**
   * Runs rounds beside the poll loop, while they come back full, if fewer than `concurrency` run
   * (the loop's included); false when there was no room. `woken`: its first round is for a commit seen.
   */
  private spawnRound(woken: boolean): boolean {
    if (!this.running || this.drainers.size >= this.options.concurrency - 1) return false;
    const drainer: Promise<void> = (async () => {
      try {
        let outcome = await this.round({ woken });
        while (this.running && outcome === 'full') outcome = await this.round();
      } catch (err) {
        this.roundFailed(err);
      }
    })().finally(() => {
      this.drainers.delete(drainer);
      // Its room is free now: a commit that found none (a round beside a waiting one was
      // finishing as it came) gets its round, or it would wait for the waiting round's end, up to inlineMs.
      if (this.besideMissed) this.roundBesideWaiting();
    });
    this.drainers.add(drainer);
    return true;
  }

  /** A round failed, the poll loop's or one run beside it: either is logged and signalled the same way. */
  private roundFailed(err: unknown): void {
    this.deps.log.warn({ err: errorMessage(err) }, 'relay round failed');
    this.deps.lifecycle.emit('relay:error', { error: err as Error });
  }

  /** One round; exposed for tests and the CLI. `woken`: a wake-up (a commit was seen) asked for it. */
  async round({ woken = false }: { woken?: boolean } = {}): Promise<'full' | 'some' | 'none'> {
    this.besideMissed = false;
    const inline = this.options.inlineMs > 0 && this.driver.capabilities.inlineDelivery && this.deps.handOff !== undefined && 'startInline' in this.deps.handOff;
    const reserve = () => (this.backlogged ? undefined : this.deps.handOff?.reserveHandOff(inline ? { limit: this.options.batchSize } : undefined) ?? undefined);
    let reservation = reserve();
    if (reservation?.targets.some((t) => t.inline)) {
      // A poll after a round that drained the events (an idle relay's, or the one right after a
      // delivery) is one round trip to learn there is nothing, not an empty transaction. A wake-up
      // says a commit just recorded events, and a full round left more: those go straight to them.
      if (this.drained && !woken) {
        // The probe holds none of the worker's room: a round started beside it, for a commit seen
        // while it is slow (roundBesideWaiting), needs that room for its inline deliveries.
        this.deps.handOff!.acceptHandOff(reservation, []);
        this.slow.set(this.probe, performance.now());
        let claimable: boolean;
        try {
          claimable = await this.driver.executor.eventClaimable();
        } finally {
          this.slow.delete(this.probe);
        }
        if (!claimable) return 'none';
        reservation = reserve();
      }
      if (reservation?.targets.some((t) => t.inline)) return this.inlineRound(reservation);
    }
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
    // Handed-off jobs are leased from the statement's now(): one that waited on a lock hands them
    // over with part of their lease gone, which the worker counts (not a wait for a connection).
    if (reservation) this.deps.handOff!.acceptHandOff(reservation, result.handedOff, performance.now() - Math.max(0, result.leaseAgeMs ?? 0));
    this.report(result.eventIds, result.jobs, result.handedOff.length);
    const outcome = this.outcome(result.eventIds.length);
    // A full round that left jobs in the queue means a backlog: its jobs wait for claims, and no
    // later job may overtake them, so offering room would only withhold it from the worker's own
    // claims. Offer again once rounds stop coming back full.
    this.backlogged = outcome === 'full' && result.jobs > result.handedOff.length;
    return outcome;
  }

  private async inlineRound(reservation: FanOutHandOff): Promise<'full' | 'some' | 'none'> {
    const handOff = this.deps.handOff as InlineTarget;
    let round: InlineRound | undefined;
    let reserved = true;
    let converted: InlineJobRow[] = [];
    let retryAt: ReadonlyMap<string, Date> | undefined;
    let result: FanOutResult;
    // Before BEGIN, so no earlier than the statement's now(), from which handed-off jobs are leased
    // (and inline jobs still running at the round's end: eventInlineFinish leases them from now()).
    const leasedAt = performance.now();
    try {
      result = await this.driver.transaction(async (q) => {
        const lean = this.leanPause === 0;
        const r = await this.driver.executor.eventFanOut(q, {
          limit: this.options.batchSize, now: this.deps.clock.now(), webhook: this.options.webhook, handOff: reservation,
          inlineIdleLimitMs: inlineIdleLimitMs(this.options.inlineMs), lean,
        });
        if (lean && !r.lean) this.leanPause = LEAN_RETRY_ROUNDS;
        else if (!lean) this.leanPause--;
        // Jobs handed off the usual way (transactional handlers) are rows of this transaction: the
        // worker gets them once it committed, or they would be completed before they exist.
        handOff.acceptHandOff(reservation, []);
        reserved = false;
        round = handOff.startInline(r.inline, leasedAt);
        if (this.stopping) round.stopWaiting();
        // Until its COMMIT is answered (deleted once the transaction ends, below): its statement,
        // and its snapshot, came before.
        this.slow.set(round, performance.now());
        this.waiting.add(round);
        try {
          await round.wait(this.options.inlineMs);
        } finally {
          this.waiting.delete(round);
        }
        const { rows, delivered } = handOff.closeInline(round);
        converted = rows;
        // The statement marked every inline delivery done; correct the events of those that were not.
        if (rows.length > 0) {
          const events = [...new Set(rows.map((x) => x.job.event.id))];
          ({ retryAt } = await this.driver.executor.eventInlineFinish(q, {
            delivered: events.map((eventId) => ({ eventId, handlers: delivered.get(eventId) ?? [] })),
            jobs: rows, workerId: handOff.workerId, now: this.deps.clock.now(),
          }));
        }
        return r;
      }, { ownStatements: true }); // only rea's statements run in it: planned once per connection (BEGIN_OWN)
    } catch (err) {
      if (round) this.slow.delete(round);
      if (reserved) handOff.acceptHandOff(reservation, []);
      if (round) handOff.endInline(round, false);
      if (this.driver.isTransientError(err)) throw err;
      this.deps.log.warn({ err: errorMessage(err) }, 'relay round failed; retrying its events one by one');
      return this.outcome(await this.rowByRow());
    }
    this.slow.delete(round!);
    handOff.endInline(round!, true, retryAt);
    handOff.handOver(result.handedOff, leasedAt);
    // Running rows stay this worker's, discarded ones are done: neither waits in the queue.
    const held = converted.filter((r) => r.state === 'running' || r.state === 'discarded').length;
    this.report(result.eventIds, result.jobs + converted.length, result.handedOff.length + held);
    const outcome = this.outcome(result.eventIds.length);
    // As for a hand-off round: inline jobs that went to the queue mean the worker cannot keep up,
    // so offer nothing until rounds stop coming back full.
    this.backlogged = outcome === 'full' && converted.some((r) => r.state === 'available');
    return outcome;
  }

  private outcome(fanned: number): 'full' | 'some' | 'none' {
    this.drained = fanned < this.options.batchSize;
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
