// The handler channel as the worker sees it: claim per registered handler within its own
// concurrency, leased for its own timeout, back off per the handler's schedule, run through
// runPlainHandler or runTransactionalHandler.
import { attemptInAllowance } from '../../core/backoff.js';
import type { Clock } from '../../core/clock.js';
import type { LazyLogger } from '../../core/logger.js';
import type { JobAbort } from '../../worker/abort.js';
import type { ClaimedJob, ClaimTarget, Driver } from '../../driver/types.js';
import type { JobChannel, RunOutcome } from '../../worker/channel.js';
import type { RegisteredHandler } from '../../worker/registry.js';
import { runPlainHandler, runTransactionalHandler } from './run.js';

export class HandlerChannel implements JobChannel {
  readonly kind = 'handler' as const;

  constructor(
    private readonly driver: Driver,
    private readonly handlers: ReadonlyMap<string, RegisteredHandler>,
    private readonly clock: Clock,
    /** Added to a handler's timeout to form the lease of the jobs this process claims. */
    private readonly leaseMarginMs: number,
    /** A transactional handler's transaction committed events it recorded through ctx.tx. */
    private readonly onRecorded: (events: number) => void = () => {},
  ) {}

  claimTargets(free: number, running: (target?: string) => number): ClaimTarget[] {
    const targets: ClaimTarget[] = [];
    for (const h of this.handlers.values()) {
      const room = Math.min(free, h.concurrency - running(h.name));
      if (room > 0) targets.push({ kind: 'handler', target: h.name, limit: room, leaseMs: h.timeoutMs + this.leaseMarginMs });
    }
    return targets;
  }

  /**
   * Inline delivery is for handlers whose whole effect is their function: a transactional one
   * completes its job in its own transaction, which needs the job's row to exist first.
   */
  inlineTargets(limit: number): ClaimTarget[] {
    const targets: ClaimTarget[] = [];
    for (const h of this.handlers.values()) {
      if (!h.transactional) targets.push({ kind: 'handler', target: h.name, limit, leaseMs: h.timeoutMs + this.leaseMarginMs });
    }
    return targets;
  }

  canStart(job: ClaimedJob, running: (target?: string) => number): boolean {
    return running(job.target) < this.handler(job).concurrency;
  }

  timeoutMs(job: ClaimedJob): number {
    return this.handler(job).timeoutMs;
  }

  backoffMs(job: ClaimedJob): number {
    const h = this.handler(job);
    return h.backoff(attemptInAllowance(job, h.maxAttempts));
  }

  timeoutMessage(_job: ClaimedJob, timeoutMs: number): string {
    return `handler timed out after ${timeoutMs} ms and was aborted`;
  }

  run(job: ClaimedJob, abort: JobAbort, log: LazyLogger): Promise<RunOutcome> {
    const h = this.handler(job);
    if (!h.transactional) return runPlainHandler(h, job, abort, log);
    return runTransactionalHandler(this.driver, h, job, abort, log, this.clock, h.timeoutMs + this.leaseMarginMs, this.onRecorded);
  }

  private handler(job: ClaimedJob): RegisteredHandler {
    // Claims only ever name registered handlers, so a miss is a bug, not user input.
    const h = this.handlers.get(job.target);
    if (!h) throw new Error(`no handler '${job.target}' registered in this process`);
    return h;
  }
}
