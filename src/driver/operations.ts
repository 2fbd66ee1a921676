// The operations side of the Driver seam: storage bounds (retention deletes), the overview's
// cheap counts and sizes, and the repair actions on jobs. Kept apart from the hot-path Executor.
import type { JobState } from './types.js';

/** What retention trims. 'app' is a table of the application's own (retention.register). */
export type RetentionTarget =
  | { kind: 'events'; olderThanMs: number; archive: boolean }
  | { kind: 'events_archive'; olderThanMs: number }
  | { kind: 'jobs'; state: 'completed' | 'discarded' | 'cancelled'; olderThanMs: number }
  | { kind: 'consumes'; olderThanMs: number }
  | { kind: 'app'; table: AppTableName; timeColumn: string; olderThanMs: number };

/** An application table, already checked to be plain identifiers. */
export interface AppTableName {
  schema: string | null;
  table: string;
}

/** A figure that is exact up to the overview's exact-count limit, then a planner estimate. */
export interface CountFigure {
  value: number;
  estimated: boolean;
}

/** The raw facts the overview and the alert evaluators are computed from. */
export interface OverviewFacts {
  /** The database clock when read (the overview's "now" unless a clock is injected). */
  readAt: Date;
  backlog: CountFigure;
  poisoned: CountFigure;
  oldestUnfannedAt: Date | null;
  /**
   * created_at of the (backlogThreshold + 1)-th oldest unfanned event: when the count crossed the
   * threshold. Null when there is none, or the threshold is above the exact-count limit (finding
   * it would walk that many index entries, more than any count here does).
   */
  backlogCrossedAt: Date | null;
  /** The earliest poisoned_at among rows still poisoned. */
  poisonedSince: Date | null;
  jobs: Record<JobState, CountFigure>;
  /** The earliest finalized_at among discarded jobs still present. */
  discardedSince: Date | null;
  /** Webhook endpoints in state disabled (few rows: always exact), and the earliest disabled_at among them. */
  endpointsDisabled: number;
  endpointsDisabledSince: Date | null;
  /**
   * Handlers no running worker has had (no heartbeat) for longer than the handler_unattended
   * threshold that still have waiting jobs (counted up to the exact limit), longest unseen first.
   * `stored` false: a name with waiting jobs but no handlers row (forgotten, then its jobs retried
   * by name), which no bus runs; its seenAt is when the earliest of those jobs came due (among
   * the first up to the exact limit).
   */
  unattendedHandlers: { name: string; seenAt: Date; waiting: number; stored: boolean }[];
  /**
   * Queues whose next job in claim order has been due longer than the jobs_waiting threshold: each
   * stored handler's (target its name), and webhook deliveries' (all endpoints together, target
   * null), with when that job came due; longest waiting first.
   */
  waitingJobs: { kind: 'handler' | 'webhook'; target: string | null; dueAt: Date }[];
  /** Every table in rea's schema with pg_total_relation_size (heap, indexes and TOAST), in bytes. */
  tables: { name: string; totalBytes: number }[];
}

export interface HandlerScheduleRow {
  name: string;
  maxAttempts: number;
  leaseMs: number;
}

/** Which stored events a bulk replay takes (the events list's filter, without state and paging). */
export interface ReplayFilterParams {
  typePattern: string | null;
  subject: string | null;
  traceId: string | null;
  minId: string | null;
  maxId: string | null;
}

export type ReplayToHandlerResult =
  | { found: false }
  | { found: true; type: string; fanned: boolean; poisoned: boolean; patterns: string[] | null; subscribes: boolean; waitingJobId: string | null; jobId: string | null };

export interface OperationsExecutor {
  /** Delete (or, for archived events, move) at most `limit` rows older than the window; returns how many. */
  retentionDelete(params: { target: RetentionTarget; limit: number; now: Date | null }): Promise<number>;
  /** How many rows a pass would remove now (for --dry-run). */
  retentionCount(params: { target: RetentionTarget; now: Date | null }): Promise<number>;
  /**
   * An application table as retention needs it: the type of its time column (null when the
   * column is missing), and whether it is partitioned or has inheritance children (its rows then
   * live in several tables), and the schema the name resolved to (an unqualified one by the
   * search_path). Null when the table is missing.
   */
  appTable(params: { table: AppTableName; column: string }): Promise<{ columnType: string | null; split: boolean; schema: string } | null>;

  /** Counts exact up to `exactLimit`, planner-estimated beyond; `backlogThreshold` places backlogCrossedAt. */
  overviewFacts(params: { exactLimit: number; backlogThreshold: number; handlerUnattendedMs: number; jobsWaitingMs: number }): Promise<OverviewFacts>;
  /** Handlers every bus has registered (from the handlers table), for the consume-record window. */
  handlerSchedules(): Promise<HandlerScheduleRow[]>;

  /** Whether a bus registered the handler, or jobs of it are still stored (it was forgotten since). */
  handlerKnown(params: { name: string }): Promise<boolean>;

  /**
   * Reschedule final, unsuccessful jobs now with a fresh allowance of attempts (a handler's current
   * maxAttempts, `webhookMaxAttempts` for a webhook delivery); returns the ids changed. Never a
   * second waiting job of one handler for one event: a job is left alone while another of its
   * handler for that event waits or runs, and of several for one event only the newest goes;
   * the events are locked first, so two retries (or a retry and a replay) of one event's jobs at
   * once take turns, and the second sees the first one's job. By state, in bounded batches.
   */
  jobRetry(params: { ids?: string[]; state?: 'discarded' | 'cancelled'; handler?: string; webhookMaxAttempts: number; now: Date | null }): Promise<string[]>;
  /**
   * A new job of handler `handler` for a stored event (events.replay), unless one of it still
   * waits or runs for that event; its consume record is deleted. What was found, for the caller's
   * error: no event, an event not yet fanned out (or poisoned), a handler unknown (patterns null)
   * or not subscribed to the event's type, or the job already waiting.
   */
  eventReplayToHandler(params: { eventId: string; handler: string; now: Date | null }): Promise<ReplayToHandlerResult>;
  /**
   * One batch of a bulk replay to a handler, in its own transaction: new jobs for at most `limit`
   * fanned, unpoisoned events after `afterId` (oldest first) that match the filter and the
   * handler's patterns, except those with a job of it still waiting or running (skipped); their
   * consume records deleted. `lastId`: the cursor for the next batch, null when none was left.
   */
  eventReplayBatch(params: {
    handler: string; afterId: string | null; filter: ReplayFilterParams; limit: number; now: Date | null;
  }): Promise<{ replayed: number; skipped: number; lastId: string | null }>;
  /** Cancel waiting jobs (available, retryable); returns the ids changed. */
  jobCancel(params: { ids: string[]; now: Date | null }): Promise<string[]>;
  /** Whether the server's autovacuum daemon is on (it is a server setting; rea cannot change it). */
  autovacuumEnabled(): Promise<boolean>;
  /** Plain VACUUM (ANALYZE) of rea's high-churn tables; takes no lock that blocks reads or writes. */
  vacuumTables(): Promise<string[]>;
  /**
   * The states of the given jobs (to tell the caller why some were left alone); waitingJobId:
   * another job of the same handler for the same event that waits or runs (jobRetry leaves a
   * job alone while there is one), or null. attemptedBy: the worker that took its last attempt (a
   * claim, a hand-off or an inline round), or null when none did or a release gave it back.
   */
  /**
   * lastError: the job's newest error entry (null: none). Optional for a driver of one's own; without
   * it, a failure whose write's reply was lost is told stored by its state and attempt alone.
   */
  jobStates(params: { ids: string[] }): Promise<{
    id: string; state: JobState; attempt: number; attemptedBy: string | null; scheduledAt: Date; eventFound: boolean; waitingJobId: string | null;
    lastError?: { name?: string; message: string } | null;
  }[]>;
}
