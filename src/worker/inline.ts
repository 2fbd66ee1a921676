// An inline round: handler jobs a relay round gave this process's worker without inserting them.
// The round's transaction stays open (its events locked, marked fanned and delivered to these jobs'
// handlers, none of it committed) while the worker runs them, for at most the round's wait. A job
// that succeeds in that time never gets a row; the others get theirs when the round ends
// (eventInlineFinish, which also takes them off their events), and then take the usual path.
// Should the round's transaction fail, nothing of it was stored: its events are delivered again.
import type { InlineJob, JobFailure } from '../driver/types.js';
import type { Logger } from '../core/logger.js';

/**
 * A failure the database's clock dates (no clock injected): it came at `failedAt`
 * (performance.now()), and its retry is due `delayMs` after it (null: none, it is discarded).
 * The statement that stores it dates its error entry and its retry from its own time, less the
 * time gone since the failure (timingNow).
 */
export interface FailureTiming {
  failedAt: number;
  delayMs: number | null;
}

/** What a failure's timing comes to for a statement sent now: JobFailure.errorAgeMs and .retryInMs. */
export function timingNow(timing: FailureTiming): { errorAgeMs: number; retryInMs?: number } {
  const errorAgeMs = performance.now() - timing.failedAt;
  return timing.delayMs === null ? { errorAgeMs } : { errorAgeMs, retryInMs: timing.delayMs - errorAgeMs };
}

export type InlineOutcome =
  | { kind: 'succeeded'; durationMs: number }
  /** log: the job's, for the failure's line once it is stored (with its due time as stored). */
  | { kind: 'failed'; failure: JobFailure; discarded: boolean; durationMs: number; timing?: FailureTiming; log: Logger }
  /** Handed back unstarted (the worker stopped): it goes to the queue. */
  | { kind: 'released' };

/**
 * open: outcomes are kept for the round. closing: the round's rows are being written; outcomes
 * wait for it. committed: every job not settled in the round has its row. failed: the round's
 * transaction ended without committing; its jobs do not exist.
 */
export type InlineState = 'open' | 'closing' | 'committed' | 'failed';

export class InlineRound {
  state: InlineState = 'open';
  readonly jobs: readonly InlineJob[];
  /** Outcomes while open, by job (the objects of `jobs`). */
  readonly outcomes = new Map<InlineJob, InlineOutcome>();
  /** Outcomes that came while closing, for the usual path once the round committed. */
  readonly late: { job: InlineJob; outcome: InlineOutcome }[] = [];
  private wake: (() => void) | undefined;
  /** stopWaiting() was called: wait() returns at once. */
  private cut = false;

  constructor(jobs: readonly InlineJob[]) {
    this.jobs = jobs;
  }

  /**
   * A job of this round ended. held: the round takes it. row: the job has its row now, so the
   * outcome takes the usual path. void: the round failed, the job never existed, and its event
   * will be delivered again.
   */
  settle(job: InlineJob, outcome: InlineOutcome): 'held' | 'row' | 'void' {
    switch (this.state) {
      case 'open':
        this.outcomes.set(job, outcome);
        if (this.outcomes.size === this.jobs.length) this.wake?.();
        return 'held';
      case 'closing':
        this.late.push({ job, outcome });
        return 'held';
      case 'committed':
        return 'row';
      case 'failed':
        return 'void';
    }
  }

  /** End the wait now (the relay is stopping): the jobs still running keep running, with rows. */
  stopWaiting(): void {
    this.cut = true;
    this.wake?.();
  }

  /** Resolves once every job has an outcome, or after ms, or at stopWaiting(). */
  wait(ms: number): Promise<void> {
    if (this.cut || this.outcomes.size === this.jobs.length) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = done;
    }).finally(() => (this.wake = undefined));
  }
}
