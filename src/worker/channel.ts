// The seam between the worker and a delivery kind: what to claim, how long a run may take, how
// to back off, and how to run one job. Handlers and webhooks are channels; a broker can be next.
import type { LazyLogger } from '../core/logger.js';
import type { ClaimedJob, ClaimTarget, JobKind } from '../driver/types.js';
import type { JobAbort } from './abort.js';

/**
 * succeeded: the worker completes the job (batched). committed: the channel already completed it
 * in its own transaction. already-consumed: the effect had committed before; nothing ran.
 * A channel signals failure by throwing: `permanent(…)` discards, `retryAfter(ms)` picks the next
 * attempt's time, anything else retries after `backoffMs`.
 */
export type RunOutcome = 'succeeded' | 'committed' | 'already-consumed';

export interface JobChannel {
  readonly kind: JobKind;
  /**
   * What to claim this round with at most `free` slots. `running(target)` counts the jobs this
   * worker holds for one target (running, or buffered beyond its prefetch allowance), `running()`
   * for all of them. Target '*' claims any target. `holding()` counts, per target of this kind,
   * the jobs the worker holds (running or buffered), with no prefetch allowance taken off; a
   * target holding none is absent.
   */
  claimTargets(free: number, running: (target?: string) => number, holding: () => ReadonlyMap<string, number>): ClaimTarget[];
  /**
   * Targets whose jobs a relay round may give this worker inline (see InlineRound), `limit` each;
   * a channel without the method has none.
   */
  inlineTargets?(limit: number): ClaimTarget[];
  /** Whether one more job like this may start now, given this channel's running jobs. */
  canStart(job: ClaimedJob, running: (target?: string) => number): boolean;
  /** The worker aborts the run after this long. */
  timeoutMs(job: ClaimedJob): number;
  /** Delay before the next attempt after `job.attempt` failed with an ordinary error. */
  backoffMs(job: ClaimedJob): number;
  run(job: ClaimedJob, abort: JobAbort, log: LazyLogger): Promise<RunOutcome>;
  /** Message for a run cut by the worker's timeout. */
  timeoutMessage(job: ClaimedJob, timeoutMs: number): string;
}
