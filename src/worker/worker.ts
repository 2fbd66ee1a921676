// Workers: claim due jobs of every channel (handlers, webhooks) up to free concurrency, run each
// inside its event's trace with a timeout, then complete or fail them in batches (one statement
// per batch, not per job).
import type { Clock } from '../core/clock.js';
import { defaultHandlerBackoff, MAX_RETRY_DELAY_MS } from '../core/backoff.js';
import { Batcher } from '../core/batcher.js';
import { describeFailure, errorMessage } from '../core/errors-format.js';
import { isPermanent, isRetryAfter } from '../core/errors.js';
import type { Lifecycle } from '../core/lifecycle.js';
import { LazyLogger, type Logger } from '../core/logger.js';
import { PollLoop } from '../core/poll.js';
import { jobLogLine, JobTraceScope, runInTrace } from '../core/trace.js';
import type { ClaimedJob, ClaimTarget, Driver, FanOutHandOff, InlineJob, InlineJobRow, JobFailure, JobKind, NewJobErrorEntry } from '../driver/types.js';
import { JobAbort } from './abort.js';
import { Deadlines, type Deadline } from './deadlines.js';
import { JobCounts } from './counts.js';
import type { JobChannel, RunOutcome } from './channel.js';
import { InlineRound, timingNow, type FailureTiming, type InlineOutcome } from './inline.js';

export interface WorkerOptions {
  concurrency: number;
  minPollMs: number;
  maxPollMs: number;
  completionFlushMs: number;
  completionBatchSize: number;
  /** Most jobs held claimed ahead of free slots (0: claim only for free slots). */
  prefetch: number;
  leaseMarginMs: number;
}


/** How much work the prefetch buffer aims to hold, in ms at the observed completion rate. */
const PREFETCH_HORIZON_MS = 200;

/** Longest the worker's first claim waits for the relay's first round at start (see startClaims). */
export const FIRST_CLAIM_WAIT_MS = 1000;

/** Longest a relay round's reservation of the worker's room holds it from claims (see reservedNow). */
export const RESERVATION_HOLD_MS = 1000;

interface Reservation {
  /** When it was made (performance.now()). */
  at: number;
  /** Room it holds in all (at most the room there was), and per target. */
  total: number;
  targets: { target: string; limit: number }[];
  /** Wakes the claim loop once it stops counting. */
  timer: NodeJS.Timeout;
}

export class HandlerTimeoutError extends Error {
  constructor(readonly timeoutMs: number, message = `handler timed out after ${timeoutMs} ms and was aborted`) {
    super(message);
    this.name = 'HandlerTimeoutError';
  }
}

export class WorkerStoppingError extends Error {
  constructor() {
    super('aborted: the worker stopped before the handler finished');
    this.name = 'WorkerStoppingError';
  }
}

interface Done {
  job: ClaimedJob;
  durationMs: number;
}

interface FailureItem {
  failure: JobFailure;
  job: ClaimedJob;
  discarded: boolean;
  /** How long the run took until it failed (what job:completed says, should the job turn out completed). */
  durationMs: number;
  /** A failure the database's clock dates: failure.errorAgeMs and .retryInMs are set from it at each write. */
  timing?: FailureTiming;
  /** The job's logger: the failure is logged once stored (emitFailed). */
  log: Logger;
  /** A stand-in record for one the database refused (see the failures batcher's isolate). */
  refused?: boolean;
  /** A write of it was sent before (and failed, or its reply was lost). */
  sent?: boolean;
}

export class Worker {
  private readonly loop: PollLoop;
  /** The running jobs' aborts, by job (the object this worker took). */
  private readonly active = new Map<ClaimedJob, JobAbort>();
  /** stop()'s wait for the running jobs to settle (see idle()). */
  private readonly whenIdle: (() => void)[] = [];
  /** The running jobs' timeouts. */
  private readonly deadlines = new Deadlines();
  // Jobs running, and claimed but waiting in the buffer, per kind and per kind + target.
  private readonly running = new JobCounts();
  private readonly buffered = new JobCounts();
  private readonly channels: ReadonlyMap<JobKind, JobChannel>;
  private readonly completions: Batcher<Done>;
  private readonly failures: Batcher<FailureItem>;
  private waitingForSlot = false;
  private stopping = false;
  /** Claimed jobs waiting for a free slot, oldest claim first. */
  private buffer: { job: ClaimedJob; claimedAt: number }[] = [];
  private bufferTimer: NodeJS.Timeout | undefined;
  /** Set by beginStop(): aborts the jobs still running when the stop's timeout has passed. */
  private stopDeadline: NodeJS.Timeout | undefined;
  /** When stopDeadline fires (performance.now() time). */
  private stopAbortAt = Number.POSITIVE_INFINITY;
  /**
   * Set by beginStop(): the claim loop has ended. Failures and releases written during a stop wait
   * for it: a claim sent before the stop (waiting for a connection) would otherwise find the jobs
   * they return to the queue, due now, claim them and release them again unrun.
   */
  private claimsEnded: Promise<void> | undefined;
  /** Completions per second, smoothed; sizes the prefetch buffer. */
  private rate = 0;
  private rateWindowStart = performance.now();
  private rateWindowCount = 0;
  private readonly releases: Batcher<ClaimedJob>;
  /** Room reserved for relay rounds in flight (see reserveHandOff), by the hand-off each was given for. */
  private readonly reservations = new Map<FanOutHandOff, Reservation>();
  private accepting = false;
  /** Jobs of inline rounds, until they settle (see InlineRound); by the job object, as `active`. */
  private readonly inlineOf = new Map<ClaimedJob, InlineRound>();
  /**
   * Relay rounds given this worker's room so far (a hand-off reserved, an inline round started): a
   * claim that saw this change while in flight checks its room again.
   */
  private relayRounds = 0;

  constructor(
    private readonly driver: Driver,
    channels: readonly JobChannel[],
    private readonly options: WorkerOptions,
    private readonly deps: { lifecycle: Lifecycle; log: Logger; clock: Clock; workerId: string },
  ) {
    this.channels = new Map(channels.map((c) => [c.kind, c]));
    this.loop = new PollLoop({
      minMs: options.minPollMs,
      maxMs: options.maxPollMs,
      round: () => this.claimRound(),
      onError: (err) => {
        deps.log.warn({ err: errorMessage(err) }, 'job claim failed');
        deps.lifecycle.emit('worker:error', { error: err as Error });
      },
    });
    this.completions = new Batcher({
      flushMs: options.completionFlushMs,
      maxBatch: options.completionBatchSize,
      write: async (items) => {
        const written = await driver.executor.jobCompleteMany(null, { jobs: items.map((d) => ({ id: d.job.id, attempt: d.job.attempt })), now: deps.clock.now() });
        // Fewer rows than jobs: some were no longer this attempt's (the lease expired and the
        // rescuer returned them), or a retry after a lost reply. Only what this attempt completed
        // is reported as completed.
        const done = written === items.length ? items : await this.completedByThisAttempt(items);
        for (const d of done) this.emitCompleted(d);
      },
      onError: (err) => this.writeFailed(err, 'writing job completions failed; will retry'),
    });
    this.releases = new Batcher({
      flushMs: options.completionFlushMs,
      maxBatch: options.completionBatchSize,
      write: async (items) => {
        await this.claimsEnded;
        // Only what the database changed: a job whose lease expired may have been rescued (and
        // claimed again) meanwhile, and its release touched nothing.
        const released = new Set(await driver.executor.jobReleaseMany({ jobs: items.map((j) => ({ id: j.id, attempt: j.attempt })) }));
        if (released.size > 0) deps.lifecycle.emit('jobs:released', { jobIds: items.filter((j) => released.has(j.id)).map((j) => j.id) });
      },
      onError: (err) => this.writeFailed(err, 'releasing unstarted jobs failed; their leases will expire and the rescuer returns them'),
    });
    this.failures = new Batcher({
      flushMs: options.completionFlushMs,
      maxBatch: options.completionBatchSize,
      write: async (items) => {
        await this.claimsEnded;
        // Sent before: a write whose reply was lost may have stored them already (see missedFailures).
        const resent = new Set(items.filter((i) => i.sent));
        for (const item of items) item.sent = true;
        const failures = items.map((i) => (i.timing ? { ...i.failure, ...timingNow(i.timing) } : i.failure));
        const written = new Map((await driver.executor.jobFailMany({ failures, now: deps.clock.now() })).map((r) => [r.id, r.scheduledAt]));
        // Fewer rows than failures: some were no longer this attempt's running job. Only what this
        // attempt recorded is reported as failed or discarded; the rest are told apart by how the
        // write found them. Looked up before any signal, so a lookup that fails (the batch is
        // written again) has announced nothing twice.
        const missed = items.filter((i) => !written.has(i.job.id));
        const found = missed.length > 0 ? await this.missedFailures(missed, resent) : new Map<FailureItem, MissedFailure>();
        for (const item of items) {
          const retryAt = written.get(item.job.id);
          if (retryAt !== undefined) this.emitFailed(item.job, item.failure, item.discarded, retryAt, item.log);
          else this.reportMissed(item, found.get(item)!);
        }
      },
      onError: (err) => this.writeFailed(err, 'writing job failures failed; will retry'),
      // Error entries are made storable (errors-format), so a refusal here is unexpected; rather
      // than hold every later failure behind it, record it once more with only the refusal in it.
      isolate: {
        isTransient: (err) => driver.isTransientError(err),
        onRefused: (item, err) => {
          // The failure's own line comes once the stand-in is stored, with the stand-in's message: name the real one here.
          deps.log.error({ err: errorMessage(err), job_id: item.job.id, job_err: item.failure.error.message }, 'the database refused a job failure record');
          if (item.refused) return; // refused twice: the job's lease expires and the rescuer returns it
          const { error } = item.failure;
          const stand = { at: error.at, attempt: error.attempt, name: 'UnstorableError', message: `the error could not be stored (${errorMessage(err)})` };
          this.failures.push({ ...item, failure: { ...item.failure, error: stand }, refused: true, sent: false });
        },
      },
    });
  }

  /**
   * A batched write (completions, failures, releases) failed: logged, and told to listeners as
   * worker:error, as a failed claim is, so whoever alerts on it sees outcomes that wait to be stored.
   */
  private writeFailed(err: unknown, message: string): void {
    this.deps.log.warn({ err: errorMessage(err) }, message);
    this.deps.lifecycle.emit('worker:error', { error: err instanceof Error ? err : new Error(errorMessage(err)) });
  }

  /** claims: false takes jobs from the relay only, until startClaims(). */
  start({ claims = true }: { claims?: boolean } = {}): void {
    this.stopping = false;
    this.accepting = true;
    this.stopDeadline = undefined;
    this.claimsEnded = undefined;
    if (claims) this.loop.start();
  }

  /**
   * Start claiming once `after` settles (the relay's first round, at start), or FIRST_CLAIM_WAIT_MS
   * from now, whichever comes first: a first round stuck on a lock must not hold queued jobs back.
   */
  startClaims(after?: Promise<unknown>): void {
    if (!after) {
      if (!this.stopping) this.loop.start();
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, FIRST_CLAIM_WAIT_MS);
      timer.unref();
    });
    void Promise.race([after.catch(() => {}), waited]).then(() => {
      clearTimeout(timer);
      if (!this.stopping) this.loop.start();
    });
  }

  wake(): void {
    this.loop.wake();
  }

  get workerId(): string {
    return this.deps.workerId;
  }

  get runningCount(): number {
    return this.active.size;
  }

  /**
   * Start no job from now on, and abort those still running once timeoutMs has passed. The bus
   * calls this as its stop begins: what comes before the worker's stop (the relay's, a claim
   * waiting for a connection that running transactional handlers hold) must not push the
   * deadline back.
   */
  beginStop(timeoutMs: number): void {
    const abortAt = performance.now() + timeoutMs;
    if (this.stopDeadline) {
      // A stop called again with less time (a second SIGTERM to rea run) brings the abort forward; never back.
      if (abortAt < this.stopAbortAt) this.scheduleAbort(timeoutMs, abortAt);
      return;
    }
    this.stopping = true;
    this.accepting = false;
    this.claimsEnded = this.loop.stop();
    this.scheduleAbort(timeoutMs, abortAt);
  }

  private scheduleAbort(timeoutMs: number, abortAt: number): void {
    clearTimeout(this.stopDeadline);
    this.stopAbortAt = abortAt;
    this.stopDeadline = setTimeout(() => {
      for (const abort of this.active.values()) abort.abort(new WorkerStoppingError());
    }, timeoutMs);
  }

  /**
   * Take no more work, for good, while the bus runs on (a newer rea migrated the schema in a way
   * this one must not run against): claims end, the relay's hand-offs go back to the queue, and so
   * do the jobs claimed ahead. Running jobs finish, and their outcomes are written; stop() still
   * ends what is left as usual.
   */
  async stopTaking(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.accepting = false;
    this.claimsEnded = this.loop.stop();
    await this.claimsEnded;
    this.releaseBuffer();
  }

  /** Stop claiming, let running handlers finish for up to timeoutMs (from beginStop), abort the rest, write outcomes. */
  async stop(timeoutMs: number): Promise<void> {
    this.beginStop(timeoutMs);
    await this.claimsEnded;
    this.releaseBuffer();
    // Every running job settles: it finishes, or the deadline aborts it (the race rejects at once).
    await this.idle();
    clearTimeout(this.stopDeadline);
    await Promise.all([this.completions.drain(5000), this.failures.drain(5000), this.releases.drain(5000)]);
  }

  /** Jobs claimed ahead but never started go straight back to the queue for another process. */
  private releaseBuffer(): void {
    clearTimeout(this.bufferTimer);
    this.bufferTimer = undefined;
    for (const { job } of this.buffer.splice(0)) {
      this.buffered.add(job, -1);
      this.settle(job, { kind: 'released' });
    }
  }

  /**
   * What this worker can take now, per channel target: free slots plus what the prefetch buffer
   * should hold at the current completion rate, less what it holds and what the relay reserved.
   */
  private offer(kinds: readonly JobKind[]): { room: number; targets: ClaimTarget[] } {
    const { room, allowance } = this.room();
    const targets: ClaimTarget[] = [];
    if (room > 0) {
      for (const kind of kinds) {
        const c = this.channels.get(kind);
        // Held = running + buffered + reserved, less the prefetch allowance, which does not count
        // against a target's limit (negative: that much allowance is left). canStart still caps
        // running jobs.
        const held = (target?: string) => this.held(kind, target) - allowance;
        if (c) targets.push(...c.claimTargets(room, held, () => this.heldByTarget(kind)));
      }
    }
    return { room, targets };
  }

  /** Free slots plus the prefetch allowance, less what the buffer holds and the relay reserved. */
  private room(): { room: number; allowance: number } {
    const free = this.options.concurrency - this.active.size;
    if (performance.now() - this.rateWindowStart > 1000) {
      this.rate /= 2; // nothing finished for a while: stop prefetching for yesterday's rate
      this.rateWindowStart = performance.now();
      this.rateWindowCount = 0;
    }
    // Before any rate is known, allow one extra round of `concurrency` jobs.
    const expected = this.rate === 0 ? this.options.concurrency : Math.ceil((this.rate * PREFETCH_HORIZON_MS) / 1000);
    const allowance = Math.min(this.options.prefetch, expected);
    return { room: free + allowance - this.buffer.length - this.reservedNow(), allowance };
  }

  /**
   * Room for the relay's next round in this process: its handler jobs up to this room are
   * inserted already claimed by this worker and handed over by acceptHandOff, with no claim
   * statement. The room stays reserved until then. Null when the worker takes nothing now.
   */
  reserveHandOff(inline?: { limit: number }): FanOutHandOff | null {
    if (!this.accepting) return null;
    // Inline targets are offered a whole round whatever the room: what the worker does not finish
    // within the round's wait goes to the queue when the round ends, so nothing is held longer.
    const inlineTargets = inline ? this.channels.get('handler')?.inlineTargets?.(inline.limit) ?? [] : [];
    const inlined = new Set(inlineTargets.map((t) => t.target));
    const { room, targets: offered } = this.offer(['handler']);
    const targets = room > 0 ? offered.filter((t) => !inlined.has(t.target)) : [];
    if (targets.length === 0 && inlineTargets.length === 0) return null;
    const limit = Math.min(Math.max(room, 0), targets.reduce((n, t) => n + t.limit, 0));
    if (limit > 0) this.relayRounds++;
    const handOff: FanOutHandOff = {
      workerId: this.deps.workerId,
      targets: [
        ...targets.map((t) => ({ target: t.target, limit: t.limit, leaseMs: t.leaseMs })),
        ...inlineTargets.map((t) => ({ target: t.target, limit: t.limit, leaseMs: t.leaseMs, inline: true })),
      ],
      limit: limit + inlineTargets.reduce((n, t) => n + t.limit, 0),
    };
    if (targets.length > 0) {
      // A round that holds its reservation past RESERVATION_HOLD_MS (its statement waits on a lock)
      // no longer counts against the room: the claim loop is woken to take it.
      const timer = setTimeout(() => {
        if (this.reservations.has(handOff)) this.loop.wake();
      }, RESERVATION_HOLD_MS);
      timer.unref();
      this.reservations.set(handOff, { at: performance.now(), total: limit, targets: targets.map((t) => ({ target: t.target, limit: t.limit })), timer });
    }
    return handOff;
  }

  /**
   * Room reserved for relay rounds in flight, for `target` or in all. A reservation older than
   * RESERVATION_HOLD_MS does not count: a hand-off round stuck on a lock (a migration's, one taken
   * by hand on the events table) held the worker's room for as long, and no claim took a queued
   * job meanwhile. Jobs such a round hands over in the end wait in the buffer for a slot.
   */
  private reservedNow(target?: string): number {
    if (this.reservations.size === 0) return 0;
    const since = performance.now() - RESERVATION_HOLD_MS;
    let n = 0;
    for (const r of this.reservations.values()) {
      if (r.at < since) continue;
      if (target === undefined) n += r.total;
      else for (const t of r.targets) if (t.target === target) n += t.limit;
    }
    return n;
  }

  /**
   * End a reservation: start or buffer the jobs the round handed over (none when it failed).
   * leasedAt: when their lease began (performance.now()); the buffer counts their age from there.
   */
  acceptHandOff(reservation: FanOutHandOff, jobs: ClaimedJob[], leasedAt = performance.now()): void {
    const held = this.reservations.get(reservation);
    if (held) {
      clearTimeout(held.timer);
      this.reservations.delete(reservation);
    }
    this.handOver(jobs, leasedAt);
  }

  /**
   * Start or buffer jobs inserted already claimed by this worker. Their lease ran from `leasedAt`
   * (performance.now()): an inline round hands them over once it committed, up to inlineMs later,
   * so they wait in the buffer as claimed then, and one that can no longer start well inside its
   * lease goes back to the queue.
   */
  handOver(jobs: ClaimedJob[], leasedAt = performance.now()): void {
    if (jobs.length === 0) return;
    this.deps.lifecycle.emit('jobs:handed-off', { jobIds: jobs.map((j) => j.id) });
    if (!this.accepting) {
      // Stopped while the round ran: the jobs go back to the queue like any unstarted claim.
      for (const job of jobs) this.releases.push(job);
      return;
    }
    this.take(jobs, leasedAt);
  }

  /**
   * An inline round's jobs: buffered like any claim, dated from the round's start (`leasedAt`): a
   * job still running when the round ends gets a row leased from then. Their outcomes go to the
   * round while it is open.
   */
  startInline(jobs: InlineJob[], leasedAt = performance.now()): InlineRound {
    const round = new InlineRound(jobs);
    this.relayRounds++;
    for (const job of jobs) this.inlineOf.set(job, round);
    if (this.accepting) this.take(byPriority(jobs), leasedAt);
    else for (const job of jobs) this.settle(job, { kind: 'released' });
    return round;
  }

  /**
   * The round's wait is over: what each of its jobs becomes. A job that succeeded is delivered and
   * gets no row; a failed one gets its row as the failure left it; one still running stays this
   * worker's (a running row, leased); one not started yet leaves the buffer for the queue.
   */
  closeInline(round: InlineRound): { rows: InlineJobRow[]; delivered: Map<string, string[]> } {
    round.state = 'closing';
    const rows: InlineJobRow[] = [];
    const unstarted = new Set<ClaimedJob>();
    for (const job of round.jobs) {
      const outcome = round.outcomes.get(job);
      if (outcome?.kind === 'succeeded') continue;
      if (outcome?.kind === 'failed') {
        const { failure, timing } = outcome;
        rows.push({
          job, state: failure.state, attempt: failure.refundAttempt ? 0 : 1, scheduledAt: failure.scheduledAt,
          ...(timing ? timingNow(timing) : {}), error: failure.error,
        });
      } else if (outcome?.kind === 'released' || !this.active.has(job)) {
        if (!outcome) unstarted.add(job);
        rows.push({ job, state: 'available', attempt: 0, scheduledAt: null, error: null });
      } else {
        rows.push({ job, state: 'running', attempt: 1, scheduledAt: null, error: null });
      }
    }
    if (unstarted.size > 0) {
      // Still in the buffer: out of it, to the queue (its row is 'available').
      this.buffer = this.buffer.filter(({ job }) => {
        if (!unstarted.has(job)) return true;
        this.buffered.add(job, -1);
        this.inlineOf.delete(job);
        return false;
      });
    }
    // The handlers that did receive the events of those rows (the round corrects only these
    // events; when every job succeeded, as most rounds go, there are none).
    const delivered = new Map<string, string[]>();
    if (rows.length > 0) {
      for (const row of rows) delivered.set(row.job.event.id, []);
      for (const job of round.jobs) {
        if (round.outcomes.get(job)?.kind === 'succeeded') delivered.get(job.event.id)?.push(job.target);
      }
    }
    return { rows, delivered };
  }

  /**
   * The round's transaction ended. Committed: report what the round settled, and send outcomes
   * that came while it closed down the usual path (their rows exist now). Not committed: nothing
   * of the round exists, its events are delivered again, and its outcomes are dropped (a failure's
   * error is still logged: it is stored nowhere).
   * retryAt: when the round's retryable rows are due, as stored (eventInlineFinish).
   */
  endInline(round: InlineRound, committed: boolean, retryAt?: ReadonlyMap<string, Date>): void {
    round.state = committed ? 'committed' : 'failed';
    if (!committed) {
      if (round.outcomes.size + round.late.length > 0) {
        this.deps.log.debug({ jobs: round.jobs.length }, 'inline round did not commit; its events will be delivered again');
      }
      for (const outcome of [...round.outcomes.values(), ...round.late.map((l) => l.outcome)]) {
        if (outcome.kind === 'failed') {
          outcome.log.warn(errorFields(outcome.failure), 'job failed in an inline round that did not commit; not recorded, and its event will be delivered again');
        }
      }
      return;
    }
    for (const [job, outcome] of round.outcomes) {
      if (outcome.kind === 'succeeded') this.emitCompleted({ job, durationMs: outcome.durationMs });
      else if (outcome.kind === 'failed') this.emitFailed(job, outcome.failure, outcome.discarded, retryAt?.get(job.id) ?? null, outcome.log);
    }
    for (const { job, outcome } of round.late) this.settle(job, outcome);
  }

  /** Where an outcome goes: to its inline round, or to the batch that writes it. */
  private settle(job: ClaimedJob, outcome: InlineOutcome): void {
    const round = this.inlineOf.get(job);
    if (round) {
      const to = round.settle(job as InlineJob, outcome);
      if (to !== 'row') {
        if (outcome.kind === 'released' && to === 'held') this.inlineOf.delete(job);
        return;
      }
    }
    if (outcome.kind === 'succeeded') this.completions.push({ job, durationMs: outcome.durationMs });
    else if (outcome.kind === 'failed') {
      const { failure, discarded, durationMs, timing, log } = outcome;
      this.failures.push({ failure, job, discarded, durationMs, log, ...(timing ? { timing } : {}) });
    }
    else this.releases.push(job);
  }

  /** Jobs just claimed (or handed off) for this worker: buffer them and start what fits. */
  private take(jobs: ClaimedJob[], claimedAt = performance.now()): void {
    // The buffer stays in claim order (dispatch() finds the stale ones at its head): jobs leased
    // earlier than the newest buffered ones go in before those.
    let at = this.buffer.length;
    while (at > 0 && this.buffer[at - 1]!.claimedAt > claimedAt) at--;
    const items = jobs.map((job) => {
      this.buffered.add(job, 1);
      return { job, claimedAt };
    });
    if (at === this.buffer.length) this.buffer.push(...items);
    else this.buffer.splice(at, 0, ...items);
    this.dispatch();
    this.watchBuffer();
  }

  private async claimRound(): Promise<'full' | 'some' | 'none'> {
    if (this.stopping) return 'none';
    const { room, targets } = this.offer([...this.channels.keys()]);
    if (room <= 0 || targets.length === 0) {
      this.waitingForSlot = true;
      return 'none';
    }
    const roundsBefore = this.relayRounds;
    const jobs = await this.driver.executor.jobClaim({ workerId: this.deps.workerId, targets, limit: room, now: this.deps.clock.now() });
    // The claim leases its jobs from its statement's now(): they are as old as the statement, not
    // the reply, which comes late when it waited on a lock or a slow server. Dated from the reply,
    // a job could start with less than the lease margin left and outlive its lease while inside
    // its timeout (the rescuer then gives it to a second run). Not dated from before the call
    // either: a wait for a pool connection (transactional handlers holding them) is no lease time.
    const claimedAt = performance.now() - Math.max(0, jobs[0]?.leaseAgeMs ?? 0);
    // A relay round given room while the claim was in flight took slots it counted on: an inline
    // round does not wait for room, and a hand-off is reserved from the room the claim counted
    // (it holds no reservation). What no longer fits goes back to the queue now: left in the
    // buffer it would wait for a slot here, out of every other process's reach, until it went
    // stale (half the lease margin) or a handler finished.
    const fits = this.relayRounds === roundsBefore ? jobs.length : Math.max(0, this.room().room);
    for (const job of jobs.slice(fits)) this.releases.push(job);
    this.take(fits < jobs.length ? jobs.slice(0, fits) : jobs, claimedAt);
    if (jobs.length >= room) {
      // Claim again once slots free up and the buffer runs low.
      this.waitingForSlot = true;
      return 'none';
    }
    return jobs.length > 0 ? 'some' : 'none';
  }

  private held(kind: JobKind, target?: string): number {
    const reserved = kind !== 'handler' ? 0 : this.reservedNow(target);
    return this.running.of(kind, target) + this.buffered.of(kind, target) + reserved;
  }

  /** Jobs held (running or buffered) per target of one kind; the counts drop zero entries, so this walks only live ones. */
  private heldByTarget(kind: JobKind): Map<string, number> {
    const out = new Map(this.running.targets(kind));
    for (const [target, n] of this.buffered.targets(kind)) out.set(target, (out.get(target) ?? 0) + n);
    return out;
  }

  /** Start buffered jobs while slots are free; release those that waited too long to start safely. */
  /**
   * While jobs wait in the buffer, look at it again every quarter of the lease margin: if every
   * slot is held by long handlers, no completion comes to trigger dispatch(), and the waiting
   * jobs must still go back to the queue in time rather than sit out a handler's timeout.
   */
  private watchBuffer(): void {
    if (this.bufferTimer || this.buffer.length === 0 || this.stopping) return;
    this.bufferTimer = setTimeout(() => {
      this.bufferTimer = undefined;
      this.dispatch();
      this.watchBuffer();
    }, Math.max(10, this.options.leaseMarginMs / 4));
    this.bufferTimer.unref?.();
  }

  private dispatch(): void {
    if (this.buffer.length === 0 || this.stopping) return;
    // A job must start well inside its lease: its timeout then fires before the lease expires,
    // so the rescuer never hands a job that is still running to another worker. That holds
    // because the lease is this worker's own (the channel's timeout plus leaseMarginMs, see
    // ClaimTarget.leaseMs), whatever another process registered. The buffer is in claim order,
    // so the stale ones are at its head.
    const staleBefore = performance.now() - this.options.leaseMarginMs / 2;
    let head = 0;
    while (head < this.buffer.length && this.buffer[head]!.claimedAt < staleBefore) {
      const { job } = this.buffer[head++]!;
      this.buffered.add(job, -1);
      this.settle(job, { kind: 'released' });
    }
    // Start jobs in order; one whose target is at its own limit waits without blocking the rest.
    let kept: { job: ClaimedJob; claimedAt: number }[] | undefined;
    let i = head;
    for (; i < this.buffer.length && this.active.size < this.options.concurrency; i++) {
      const item = this.buffer[i]!;
      const channel = this.channels.get(item.job.kind)!;
      if (channel.canStart(item.job, (target) => this.runningOf(item.job.kind, target))) {
        this.buffered.add(item.job, -1);
        this.execute(item.job, channel);
      } else {
        (kept ??= []).push(item);
      }
    }
    if (head === 0 && i === 0) return;
    // In place: this runs at every completion, and a copy of the rest of the buffer each time
    // was most of the worker's garbage with a full round's jobs waiting.
    if (kept) this.buffer.splice(0, i, ...kept);
    else this.buffer.splice(0, i);
  }

  private runningOf(kind: JobKind, target?: string): number {
    return this.running.of(kind, target);
  }

  /**
   * Run the job: its timeout, its trace and its outcome, then its slot is free. Driven by the
   * channel's promise and callbacks, not by async functions: with AsyncLocalStorage's promise hooks
   * on (Node 20, once a handler's trace is entered), each async frame and each await is a promise
   * more, paid in the hooks and the collector. The nested frames (the run, the wait for its end)
   * made 9.2 promises a no-op inline job, the handler's own and the round's share included; this
   * makes 4.2 (async_hooks' count over 10,000 jobs).
   */
  private execute(job: ClaimedJob, channel: JobChannel): void {
    const abort = new JobAbort();
    this.running.add(job, 1);
    this.active.set(job, abort);
    const started = performance.now();
    const scope = new JobTraceScope(job.event.traceId, job.event.id, job.target, job.attempt, job.eventSpan);
    // The trace fields go on each line (jobLogLine): they are the span active there.
    const log = new LazyLogger(this.deps.log, () => ({
      event_id: job.event.id,
      ...(job.kind === 'handler' ? { handler: job.target } : { kind: job.kind, target: job.target }),
      attempt: job.attempt, job_id: job.id,
    }), jobLogLine(scope));
    let deadline: Deadline | undefined;
    const finish = (outcome: RunOutcome | null, thrown?: unknown): void => {
      try {
        if (deadline) this.deadlines.cancel(deadline);
        const durationMs = performance.now() - started;
        if (outcome === null) this.fail(job, channel, abort.aborted ? abort.reason : thrown, log, durationMs);
        else if (outcome === 'succeeded') this.settle(job, { kind: 'succeeded', durationMs });
        else {
          if (outcome === 'already-consumed') {
            this.deps.lifecycle.emit('job:skipped', { jobId: job.id, handler: job.target, eventId: job.event.id, reason: 'already-consumed' });
          }
          // 'committed' (or nothing ran): the channel completed the job in its own transaction.
          this.emitCompleted({ job, durationMs });
        }
      } catch (err) {
        // The above handles everything a job can throw; a bug of rea's own must still not become
        // an uncaught exception (which ends the process): log it, and the job's lease brings it back.
        this.deps.log.error({ err: errorMessage(err), job_id: job.id }, 'running a job failed inside rea; its lease will expire and the rescuer returns it');
      }
      this.ended(job);
    };
    let work: Promise<RunOutcome>;
    try {
      const timeoutMs = channel.timeoutMs(job);
      deadline = this.deadlines.add(timeoutMs, () => abort.abort(new HandlerTimeoutError(timeoutMs, channel.timeoutMessage(job, timeoutMs))), started);
      if (!job.eventFound) throw new MissingEventError(job.event.id);
      work = runInTrace(scope, () => channel.run(job, abort, log));
    } catch (err) {
      // Settled as a rejection, never here: this runs inside dispatch(), which the job's end calls again.
      work = Promise.reject(err);
    }
    work.then((outcome) => finish(outcome), (err: unknown) => finish(null, err));
  }

  /** A job settled: its slot is free for the next one. */
  private ended(job: ClaimedJob): void {
    this.active.delete(job);
    this.inlineOf.delete(job);
    this.running.add(job, -1);
    this.noteCompletion();
    this.dispatch();
    if (this.waitingForSlot && !this.stopping && this.buffer.length <= this.options.concurrency) {
      this.waitingForSlot = false;
      this.loop.wake();
    }
    if (this.active.size === 0 && this.whenIdle.length > 0) for (const resolve of this.whenIdle.splice(0)) resolve();
  }

  /** Resolves once no job runs. */
  private idle(): Promise<void> {
    if (this.active.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.whenIdle.push(resolve));
  }

  private noteCompletion(): void {
    this.rateWindowCount++;
    const now = performance.now();
    const elapsed = now - this.rateWindowStart;
    if (elapsed >= 25) {
      const instant = (this.rateWindowCount * 1000) / elapsed;
      this.rate = this.rate === 0 ? instant : this.rate * 0.6 + instant * 0.4;
      this.rateWindowStart = now;
      this.rateWindowCount = 0;
    }
  }

  private fail(job: ClaimedJob, channel: JobChannel, err: unknown, log: Logger, durationMs: number): void {
    const injected = this.deps.clock.now();
    const failedAt = performance.now();
    // Dated by the database's clock when the failure is stored (errorAgeMs), as its retry is: this
    // host's time put the entry minutes away from the job's lease and retry times when its clock
    // was off. An injected clock (tests) dates it itself.
    const entry: NewJobErrorEntry = {
      ...(injected ? { at: injected.toISOString() } : {}),
      attempt: job.attempt,
      ...describeFailure(err),
    };
    let state: 'retryable' | 'discarded';
    let delayMs: number | null = null;
    if (err instanceof WorkerStoppingError) {
      // A shutdown is not the handler's fault: run it again at once, elsewhere, and do not count
      // the attempt (at the last attempt, counting it would leave the job one try short).
      state = 'retryable';
      delayMs = 0;
    } else if (isPermanent(err) || err instanceof MissingEventError || job.attempt >= job.maxAttempts) {
      state = 'discarded';
    } else {
      state = 'retryable';
      delayMs = this.retryDelayMs(job, channel, err, log);
    }
    // The claim compares scheduled_at with the database's clock, so the retry is dated by it: the
    // write stores now() + the delay (less the time since the failure). A time taken from this
    // host's clock was off by the host's skew: 2 min ahead made a 1 s backoff 2 min, 2 min behind
    // ran the next attempt at once. An injected clock (tests) dates it itself, as the SQL takes its time.
    const scheduledAt = delayMs !== null && injected ? new Date(injected.getTime() + delayMs) : null;
    const timing = injected ? undefined : { failedAt, delayMs };
    // Not logged here but once stored (emitFailed), with its retry_at as stored: one of this
    // host's clock said another time than the job's, by the host's skew.
    const failure: JobFailure = { id: job.id, attempt: job.attempt, state, scheduledAt, error: entry };
    if (err instanceof WorkerStoppingError) failure.refundAttempt = true;
    this.settle(job, { kind: 'failed', failure, discarded: state === 'discarded', durationMs, log, ...(timing ? { timing } : {}) });
  }

  /**
   * The wait before the next attempt. A user's backoff that throws or returns no usable number (a
   * forgotten `return`, NaN) must not leave the job running: it is logged and the default schedule
   * is used. A delay past MAX_RETRY_DELAY_MS is cut to it, so the time stays storable.
   */
  private retryDelayMs(job: ClaimedJob, channel: JobChannel, err: unknown, log: Logger): number {
    let delay: unknown;
    try {
      delay = isRetryAfter(err) ? err.delayMs : channel.backoffMs(job);
    } catch (thrown) {
      delay = thrown;
    }
    if (typeof delay === 'number' && delay >= 0) return Math.min(delay, MAX_RETRY_DELAY_MS);
    log.error(
      { backoff_result: delay instanceof Error ? errorMessage(delay) : String(delay) },
      'the backoff gave no delay (it must return a number of ms ≥ 0); retrying on the default schedule',
    );
    return defaultHandlerBackoff(job.attempt);
  }

  private async completedByThisAttempt(items: Done[]): Promise<Done[]> {
    const states = new Map((await this.driver.operations.jobStates({ ids: items.map((d) => d.job.id) })).map((s) => [s.id, s]));
    return items.filter((d) => {
      const s = states.get(d.job.id);
      if (s && this.completedHere(s, d.job)) return true;
      this.deps.log.warn(
        { job_id: d.job.id, attempt: d.job.attempt, now: s ? this.describeState(s) : 'gone' },
        'a job finished after its lease expired; the rescuer had already returned it to the queue, so this run does not count',
      );
      return false;
    });
  }

  /** How the jobs of failures the write left alone were found (see MissedFailure). */
  private async missedFailures(items: FailureItem[], resent: ReadonlySet<FailureItem>): Promise<Map<FailureItem, MissedFailure>> {
    const states = new Map((await this.driver.operations.jobStates({ ids: items.map((i) => i.job.id) })).map((s) => [s.id, s]));
    return new Map(items.map((item): [FailureItem, MissedFailure] => {
      const { job, failure } = item;
      const s = states.get(job.id);
      if (!s) return [item, { kind: 'elsewhere', now: 'gone' }];
      // Stored by the write whose reply was lost: its state and attempt, and its error as the
      // newest entry. The state and attempt alone are also a rescued job's (LeaseExpired, at the
      // same attempt) that no worker took again yet: this run's failure was then said stored, its
      // job:failed told, and its error was not the job's.
      if (resent.has(item) && s.state === failure.state && s.attempt === failure.attempt - (failure.refundAttempt ? 1 : 0)
        && (s.lastError === undefined || sameError(s.lastError, failure.error))) {
        return [item, { kind: 'stored', retryAt: s.scheduledAt }];
      }
      if (this.completedHere(s, job)) return [item, { kind: 'completed' }];
      return [item, { kind: 'elsewhere', now: this.describeState(s) }];
    }));
  }

  /**
   * The job was completed by this very run: at its attempt, and by this worker. The attempt alone
   * does not say so: a job given back uncounted (a release, a stop's refund) is taken again at the
   * same number, and another worker's completion of it was taken for this run's own (a lost COMMIT
   * reply: job:completed for a run that failed, and its failure said to be no failure).
   */
  private completedHere(s: JobStateRow, job: ClaimedJob): boolean {
    return s.state === 'completed' && s.attempt === job.attempt && s.attemptedBy === this.deps.workerId;
  }

  /** A job's state for a log line, naming the worker that took its attempt when it is not this one. */
  private describeState(s: JobStateRow): string {
    const by = s.attemptedBy !== null && s.attemptedBy !== this.deps.workerId ? ` by ${s.attemptedBy}` : '';
    return `${s.state}, attempt ${s.attempt}${by}`;
  }

  private reportMissed(item: FailureItem, found: MissedFailure): void {
    const { job, failure } = item;
    const fields = { job_id: job.id, attempt: job.attempt, err: failure.error.message };
    switch (found.kind) {
      case 'stored':
        return this.emitFailed(job, failure, item.discarded, found.retryAt, item.log);
      case 'completed':
        // Not the lease: the job was this attempt's all along, and it completed.
        this.deps.log.warn(
          { ...fields, now: `completed, attempt ${job.attempt}` },
          'a job\'s completion had committed although its reply was lost, so its run failed waiting for it; the job is completed, once, and this failure is not recorded',
        );
        return this.emitCompleted({ job, durationMs: item.durationMs });
      case 'elsewhere':
        this.deps.log.warn(
          { ...fields, now: found.now },
          'a job failed after its lease expired; the rescuer had already returned it to the queue, so this run\'s failure is not recorded',
        );
    }
  }

  /**
   * A failure is stored: its line in the log (retry_at: the due time as stored, by the clock the
   * claim reads), and job:failed or job:discarded.
   */
  private emitFailed(job: ClaimedJob, failure: JobFailure, discarded: boolean, retryAt: Date | null, log: Logger): void {
    log.warn({ ...errorFields(failure), retry_at: discarded ? null : retryAt?.toISOString() ?? null }, discarded ? 'job discarded' : 'job failed; will retry');
    const e = {
      jobId: job.id, handler: job.target, eventId: job.event.id, attempt: job.attempt, error: failure.error.message,
      ...(failure.error.name ? { errorName: failure.error.name } : {}), kind: job.kind,
    };
    if (discarded) this.deps.lifecycle.emit('job:discarded', e);
    else this.deps.lifecycle.emit('job:failed', { ...e, retryAt });
  }

  private emitCompleted(d: Done): void {
    // Most processes have no listener (the metrics and the demo do): no payload to build then.
    if (!this.deps.lifecycle.listened('job:completed')) return;
    this.deps.lifecycle.emit('job:completed', {
      jobId: d.job.id, handler: d.job.target, eventId: d.job.event.id, attempt: d.job.attempt, durationMs: d.durationMs, kind: d.job.kind,
    });
  }
}

/**
 * A failure the write left alone, by how its job was found. stored: an earlier write of it, whose
 * reply was lost, had stored it. completed: completed at this very attempt, by this worker (a
 * transactional handler's commit went through, its reply was lost, and the run failed waiting for it).
 * elsewhere: no longer this attempt's (its lease expired and the rescuer returned it).
 */
type MissedFailure = { kind: 'stored'; retryAt: Date } | { kind: 'completed' } | { kind: 'elsewhere'; now: string };

type JobStateRow = Awaited<ReturnType<Driver['operations']['jobStates']>>[number];

/** A stored error entry is this failure's: the same class and message (the entry as sent is storable already). */
function sameError(stored: { name?: string; message: string } | null, sent: NewJobErrorEntry): boolean {
  return stored !== null && stored.message === sent.message && (stored.name ?? undefined) === (sent.name ?? undefined);
}

/** A failure's error in a log line: its message, and its class when it has one. */
function errorFields({ error }: JobFailure): { err: string; err_name?: string } {
  return { err: error.message, ...(error.name ? { err_name: error.name } : {}) };
}

/** The job's event is gone (retention deleted it before the job ran): the job is discarded, as no attempt could succeed. */
export class MissingEventError extends Error {
  constructor(eventId: string) {
    super(`event ${eventId} no longer exists (deleted by retention before its job ran)`);
    this.name = 'MissingEventError';
  }
}

/**
 * An inline round's jobs come grouped by handler (the order its statement numbered them), not as a
 * claim orders them: with few free slots, a low-priority handler registered first ran its whole
 * round before any job of a higher one. In priority order (lowest first) then, as a claim is; the
 * sort is stable, so each priority keeps its events' order. Most rounds have one priority: no sort.
 */
function byPriority(jobs: InlineJob[]): InlineJob[] {
  // Not jobs[0] of an empty round: a read past the end deoptimised startInline.
  if (jobs.length < 2) return jobs;
  const first = jobs[0]!.priority;
  if (jobs.every((j) => j.priority === first)) return jobs;
  return [...jobs].sort((a, b) => a.priority - b.priority);
}

