// The verdict of a chaos run (test/chaos/run.ts): why it failed, from its summary; empty when it
// passed. Kept apart from the runner so that the rules themselves are tested (test/chaos-verdict.test.ts).

/**
 * The lean path must have run on both sides of the PostgreSQL restart: at least this many lean
 * deliveries made inline among the events recorded before it, and as many among those recorded
 * once it was back (or in all, with --no-restart). A share would not do: runs here made 18-99 %
 * of their lean deliveries inline, fewer on a loaded machine and in the full mode's 50 kills, as
 * a delivery that fails or outlasts its round's wait gets a row, and while a row of that handler
 * waits, its new events get rows too (no overtaking).
 */
export const LEAN_INLINE_MIN = 20;

/**
 * After the failover, each stage of delivery (FAILOVER_STAGES) must have run again over a new
 * connection within this: the workers' deadline (queryTimeoutMs, 3 s in
 * test/chaos/worker-options.ts) for the statements they had in flight, the LISTEN connection's
 * check, a leader lease, and a wide margin for a loaded machine. Without the deadline they waited
 * for TCP to give up, ~15 minutes.
 */
export const FAILOVER_RECOVERY_MAX_MS = 20_000;

/**
 * What must have run again after the failover, each in a statement begun after it (one begun
 * before, on a connection the failover silenced, never ends): a relay round of each group's
 * workers, a claim whose job was then completed, and a plain handler's write. Not the first
 * delivery of an event recorded after the failover, as it was: claims take the oldest jobs first,
 * so behind a backlog that measured how long the backlog took to drain (the full mode's 50 kills,
 * each restarting a worker, leave one of 15,000-20,000 jobs on a loaded two-core machine: 52-63 s).
 */
export const FAILOVER_STAGES = ['relay round', 'lean relay round', 'claim and completion', 'plain handler\'s write'] as const;
export type FailoverStage = (typeof FAILOVER_STAGES)[number];

export interface ChaosSummary {
  lost: number;
  duplicateEffects: number;
  stuckJobs: number;
  discardedJobs: number;
  lean: {
    lost: number;
    deliveredInline: number;
    /** Null when PostgreSQL was not restarted. */
    inlineBeforeRestart: number | null;
    inlineAfterRestart: number | null;
    stuckJobs: number;
    discardedJobs: number;
  };
  /** The main group's webhook deliveries (run.ts: its receiver, src/cli/local-receiver.ts). */
  webhooks: {
    /** Events of the webhook's type stored: 0 means the run did not test webhook deliveries. */
    stored: number;
    /** Acknowledged but not stored, or stored and never received with a valid signature. */
    lost: number;
    /** Deliveries whose signature did not verify. */
    rejected: number;
  };
  /** The transaction held open through the first half of the faults (run.ts, openLongTransaction). */
  longTransaction: {
    /** Events it committed: 0 when it did not commit, and the run did not test events that become visible late. */
    committed: number;
    /** Of those, the ones without their transactional effect or their plain one. */
    undelivered: number;
  };
  failover: {
    /** Worker connections the failover left silent: 0 means it was not staged. */
    silenced: number;
    /** From the failover to each stage's first run after it (see FAILOVER_STAGES); null: it never ran again. */
    resumedMs: Record<FailoverStage, number | null>;
  };
  /** Workers that exited without being told to. */
  workerCrashes: number;
  /** Workers still running long after the SIGTERM that ends the run. */
  workersHungAtStop: number;
}

/** Every reason the run failed; empty when it passed. */
export function failures(s: ChaosSummary): string[] {
  const stuck = s.stuckJobs + s.lean.stuckJobs;
  const discarded = s.discardedJobs + s.lean.discardedJobs;
  return [
    s.lost > 0 && `${s.lost} events lost`,
    s.duplicateEffects > 0 && `${s.duplicateEffects} duplicate transactional effects`,
    stuck > 0 && `${stuck} jobs stuck`,
    discarded > 0 && `${discarded} jobs discarded`,
    s.lean.lost > 0 && `${s.lean.lost} lean events lost`,
    ...leanPathGaps(s.lean),
    s.webhooks.stored === 0 && 'no event of the webhook\'s type was stored: the run did not test webhook deliveries',
    s.webhooks.lost > 0 && `${s.webhooks.lost} webhook events never delivered`,
    s.webhooks.rejected > 0 && `${s.webhooks.rejected} webhook deliveries with a bad signature`,
    s.longTransaction.committed === 0 && 'the long transaction committed no events: the run did not test events that become visible late',
    s.longTransaction.undelivered > 0 && `${s.longTransaction.undelivered} events of the long transaction not delivered`,
    ...failoverGaps(s.failover),
    s.workerCrashes > 0 && `${s.workerCrashes} workers crashed`,
    s.workersHungAtStop > 0 && `${s.workersHungAtStop} workers did not stop on SIGTERM`,
  ].filter((r): r is string => typeof r === 'string');
}

/** Why the workers did not get through the failover (see FAILOVER_STAGES); empty when they did. */
function failoverGaps(failover: ChaosSummary['failover']): string[] {
  if (failover.silenced === 0) return ['the failover silenced no worker connection: it was not staged'];
  return FAILOVER_STAGES.flatMap((stage) => {
    const ms = failover.resumedMs[stage];
    if (ms === null) return [`no ${stage} after the failover`];
    return ms > FAILOVER_RECOVERY_MAX_MS ? [`the first ${stage} came ${ms} ms after the failover (at most ${FAILOVER_RECOVERY_MAX_MS} expected)`] : [];
  });
}

/** Why the run did not exercise the lean inline path (see LEAN_INLINE_MIN); empty when it did. */
function leanPathGaps(lean: ChaosSummary['lean']): string[] {
  const few = (n: number) => n < LEAN_INLINE_MIN;
  if (lean.inlineBeforeRestart === null || lean.inlineAfterRestart === null) {
    return few(lean.deliveredInline) ? [`only ${lean.deliveredInline} lean deliveries were inline (at least ${LEAN_INLINE_MIN} expected): the run did not exercise the lean path`] : [];
  }
  const gaps: string[] = [];
  if (few(lean.inlineBeforeRestart)) gaps.push(`only ${lean.inlineBeforeRestart} lean deliveries were inline before the PostgreSQL restart (at least ${LEAN_INLINE_MIN} expected)`);
  if (few(lean.inlineAfterRestart)) gaps.push(`only ${lean.inlineAfterRestart} lean deliveries were inline after the PostgreSQL restart (at least ${LEAN_INLINE_MIN} expected)`);
  return gaps;
}
