// The Driver seam: everything relay, worker, maintenance and admin code needs from a database.
// No pg, PGlite or mysql2 type crosses this seam; each driver owns its SQL and migrations.
import type { AdminExecutor } from './admin.js';
import type { WebhookExecutor } from './webhooks.js';
import type { OperationsExecutor } from './operations.js';
import type { EventSpan } from '../core/trace.js';

/** The least a database handle must offer: run one statement with positional parameters. */
export interface Queryable {
  query<R = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<{ rows: R[]; rowCount?: number | null }>;
}

export interface TransactionOptions {
  /** Events to write just before COMMIT (with `deferredRecord`, in the same round trip). */
  pendingEvents?: () => EventInsert[];
  /**
   * True once fn was cut short by its job's abort (a transactional handler's timeout, a stop): its
   * statement may still be running and the handler may still write through the raw handle, so
   * the driver cancels the statement and drops the connection rather than queue a ROLLBACK behind it.
   * Given, it also means the caller bounds fn: the application's statements in it then get no
   * statement deadline of the driver's (rea's own still do).
   */
  aborted?: () => boolean;
  /**
   * Only rea's own statements run in it (a relay round): they are planned generically, once per
   * connection, rather than for each run's parameters (see PostgresDriver's transaction).
   */
  ownStatements?: boolean;
}

/** Where a schema stands against this rea's migrations; Driver.migrationStatus. */
export interface MigrationStatus {
  /** This rea's migrations not applied yet (all of them in a schema without rea's tables): what `rea migrate` would apply. */
  pending: Array<{ version: number; name: string }>;
  /** Migrations of a newer rea applied to the schema. */
  newer: number[];
  /** Those of `newer` marked breaking: this rea refuses to write to the schema. */
  breaking: number[];
  /** The newest migration this rea ships. */
  knownUpTo: number;
}

export interface DriverCapabilities {
  /** The server may run autovacuum in the background (PGlite has no background workers). */
  readonly autovacuumDaemon: boolean;
  /** record() into bus.transaction may wait for COMMIT and travel with it (saves a round trip). */
  readonly deferredRecord: boolean;
  /** LISTEN/NOTIFY wake-ups across processes; without it, relay and workers poll. */
  readonly listenNotify: boolean;
  /** SELECT … FOR UPDATE SKIP LOCKED for claims. */
  readonly skipLocked: boolean;
  /** Several connections at once (PGlite is one connection, so one transaction at a time). */
  readonly concurrentTransactions: boolean;
  /**
   * A relay round may hold its transaction open while this process's handlers run its jobs
   * (inline delivery; eventFanOut with inline targets, then eventInlineFinish). Needs
   * concurrentTransactions: the handlers use other connections meanwhile.
   */
  readonly inlineDelivery: boolean;
  /** A short name for logs and errors: 'postgres', 'pglite', 'mysql'. */
  readonly dialect: string;
}

export type JobState = 'available' | 'running' | 'completed' | 'retryable' | 'discarded' | 'cancelled';
export const JOB_STATES: readonly JobState[] = ['available', 'running', 'completed', 'retryable', 'discarded', 'cancelled'];

export type JobKind = 'handler' | 'webhook' | 'forward';

export interface EventInsert {
  id: string;
  type: string;
  subject: string | null;
  /** The payload already serialized as JSON (validated and size-checked by the caller). */
  payloadJson: string;
  traceId: string | null;
  /** The OpenTelemetry span that recorded it, in trace traceId (both null or both set). */
  spanId: string | null;
  traceFlags: number | null;
  createdBy: string | null;
  version: number;
}

/** A subscription the relay routes to: an in-process handler registered by some bus. */
export interface HandlerSubscription {
  name: string;
  /** Exact types and `prefix.*` patterns. */
  patterns: string[];
  coalesceSubject: boolean;
  maxAttempts: number;
  /**
   * This process's lease for the handler (its timeout plus a margin), kept in the handlers table
   * for retention and operators. A job is leased by its worker's own ClaimTarget.leaseMs, never by
   * this: processes may disagree on a handler's timeout (a rolling deploy), the last to start wins.
   */
  leaseMs: number;
  priority: number;
}

/**
 * How the relay makes webhook jobs: attempts, lease (longer than the HTTP timeout; recorded on the
 * job until a worker claims it with its own), delay while failing.
 */
export interface WebhookFanOut {
  maxAttempts: number;
  leaseMs: number;
  failingDelayMs: number;
}

/**
 * Room the worker of the process running a relay round offers for that round's handler jobs:
 * those jobs are inserted already claimed by it (running, attempt 1, leased) and handed over in
 * memory, so they need no claim statement. `limit` caps them in all, each target its own limit.
 */
export interface FanOutHandOff {
  workerId: string;
  /**
   * leaseMs as in ClaimTarget: the worker's own lease for a job of that handler. inline: that
   * handler's jobs are not inserted but come back as FanOutResult.inline (drivers with
   * capabilities.inlineDelivery, in a transaction the caller ends with eventInlineFinish).
   */
  targets: { target: string; limit: number; leaseMs: number; inline?: boolean }[];
  limit: number;
}

/** A job of an inline round: it has an id but no row until eventInlineFinish gives it one. */
export interface InlineJob extends ClaimedJob {
  leaseMs: number;
  priority: number;
}

/** How an inline job ends its round: its row, when it needs one (a delivery that succeeded has none). */
export interface InlineJobRow {
  job: InlineJob;
  /** running: not finished when the round ended (this worker still has it); available: never started. */
  state: 'running' | 'available' | 'retryable' | 'discarded';
  /** 1 once it ran (running, or a failure counted), 0 when never started or the attempt was refunded. */
  attempt: number;
  /** When a retryable job is due, by an injected clock; null: now, or retryInMs after it. */
  scheduledAt: Date | null;
  /** As JobFailure.retryInMs: due this long after the statement's now() (when scheduledAt is null). */
  retryInMs?: number;
  error: NewJobErrorEntry | null;
  /** As JobFailure.errorAgeMs. */
  errorAgeMs?: number;
}

export interface FanOutResult {
  /** Ids of the events marked fanned out in this round, oldest first. */
  eventIds: string[];
  /** Number of jobs inserted, handed-off ones included. */
  jobs: number;
  /** The jobs inserted already claimed for the hand-off's worker, by id; a driver may hand off none. */
  handedOff: ClaimedJob[];
  /**
   * Inline jobs (targets with inline), not in the jobs table; empty unless asked for. Their events
   * are marked delivered to them, in the statement's transaction, which must not commit before
   * eventInlineFinish has corrected that for the ones that did not succeed.
   */
  inline: InlineJob[];
  /** The round was a lean one (see eventFanOut's lean): routing once per event type, no job rows. */
  lean?: true;
  /** How long the handed-off jobs' lease had run when the statement answered (ms, server clock), where the driver says. */
  leaseAgeMs?: number;
}

export interface StoredEvent {
  id: string;
  type: string;
  subject: string | null;
  payload: unknown;
  traceId: string | null;
  createdBy: string | null;
  version: number;
  createdAt: Date;
}

export interface ClaimedJob {
  id: string;
  kind: JobKind;
  target: string;
  attempt: number;
  maxAttempts: number;
  /** How many events this job stands for (more than one when the relay coalesced per subject). */
  coalesced: number;
  event: StoredEvent;
  /**
   * The OpenTelemetry span that recorded the event, where one was stored: the parent of the
   * handler's spans. Kept beside the event, not in it: the handler is given the event as it is.
   */
  eventSpan: EventSpan | null;
  /** False when the event row is gone (deleted by retention before the job ran). */
  eventFound: boolean;
  /**
   * From a claim: how long its lease had run when the claim statement answered (ms, by the
   * server's clock; a statement that waited on a lock leases its jobs from its start).
   */
  leaseAgeMs?: number;
}

export interface JobErrorEntry {
  at: string;
  attempt: number;
  message: string;
  name?: string;
  stack?: string;
}

/**
 * An error entry to store: `at` is given only by an injected clock (tests); without one the
 * statement dates it by the database's clock (see JobFailure.errorAgeMs).
 */
export type NewJobErrorEntry = Omit<JobErrorEntry, 'at'> & { at?: string };

export interface JobFailure {
  id: string;
  attempt: number;
  /** 'retryable' schedules another attempt at `scheduledAt`, or `retryInMs` from now; 'discarded' ends the job. */
  state: 'retryable' | 'discarded';
  /** A time of the injected clock (tests); null where the database's clock decides. */
  scheduledAt: Date | null;
  /**
   * With scheduledAt null: the next attempt is due this many ms after the statement's now(), by
   * the database's clock, which the claim compares scheduled_at with; a time from the
   * application host's clock would be off by that host's skew. Below 0 when the wait, counted
   * from the failure, began before the statement.
   */
  retryInMs?: number;
  error: NewJobErrorEntry;
  /**
   * With error.at absent: the failure came this many ms before the statement, which dates the
   * entry by the database's clock, as it dates the retry; the application host's clock would put
   * an entry minutes away from its job's lease and retry times when it is off.
   */
  errorAgeMs?: number;
  /** The attempt does not count (a shutdown cut it short): the job's attempt goes back by one. */
  refundAttempt?: boolean;
}

export interface ClaimTarget {
  kind: JobKind;
  target: string;
  limit: number;
  /**
   * How long the claiming worker leases each job: longer than it lets the run take (its own
   * timeout plus a margin), so the rescuer never frees a job while this worker still runs it.
   */
  leaseMs: number;
  /**
   * Target '*' only: at most `limit` jobs of any one target held by the claiming worker at once
   * (running, or claimed and waiting to start). `held` lists the targets it holds jobs of now and
   * how many: the claim skips those at the limit and takes no more than the room left of each
   * other. A job over the limit is left in the queue as it was, for a later claim or another process.
   */
  perTarget?: { limit: number; held: { target: string; count: number }[] };
}

export interface StatusCounts {
  backlog: number;
  poisoned: number;
  oldestUnfannedAt: Date | null;
  jobs: Record<JobState, number>;
}

export interface EventRow extends StoredEvent {
  fannedOutAt: Date | null;
  fanAttempts: number;
  poisonedAt: Date | null;
  lastError: string | null;
  /** Handlers that received this event inline, in the relay's round (no job row; see relay.inlineMs). */
  deliveredInline: string[];
}

export interface JobRow {
  id: string;
  eventId: string;
  kind: JobKind;
  target: string;
  state: JobState;
  attempt: number;
  maxAttempts: number;
  priority: number;
  coalesced: number;
  scheduledAt: Date;
  attemptedAt: Date | null;
  finalizedAt: Date | null;
  leaseExpiresAt: Date | null;
  createdAt: Date;
  errors: JobErrorEntry[];
}

/**
 * The statements rea runs, named entity + verb. Methods taking `q` run on a handle the caller
 * chose (the user's transaction, or one of rea's); the others run on the driver's own pool.
 * `now` is injectable everywhere time matters; null means the database clock.
 */
export interface Executor {
  eventInsertMany(q: Queryable, events: EventInsert[]): Promise<void>;
  /** Claim ≤ limit unfanned events (skip locked, oldest first), insert their jobs, mark them fanned. */
  eventFanOut(q: Queryable, params: {
    limit: number; onlyId?: string; now: Date | null; webhook?: WebhookFanOut; handOff?: FanOutHandOff;
    /** Inline rounds: the server ends the transaction after it sat idle this long (a frozen process). */
    inlineIdleLimitMs?: number;
    /**
     * Inline rounds: first try the lean round (FanOutResult.lean), which only applies when every
     * handler the claimed events route to is an inline target of this hand-off with room for them
     * and nothing else (webhooks, coalescing, other handlers, a queued job of theirs) is involved.
     */
    lean?: boolean;
  }): Promise<FanOutResult>;
  /** Whether some unfanned, unpoisoned event is not locked by another round (inline rounds after an empty one ask first). */
  eventClaimable(): Promise<boolean>;
  /**
   * End an inline round whose deliveries did not all succeed, in the transaction of its
   * eventFanOut: set each given event's delivered_inline to the handlers that did receive it, and
   * insert the rows of the inline jobs given.
   */
  eventInlineFinish(q: Queryable, params: {
    delivered: { eventId: string; handlers: string[] }[]; jobs: InlineJobRow[]; workerId: string; now: Date | null;
  }): Promise<{ corrected: number; converted: number; retryAt: Map<string, Date> }>;
  /** Oldest unfanned, unpoisoned event ids, for the row-by-row retry of a failed round. */
  eventListUnfanned(params: { limit: number }): Promise<string[]>;
  /** Count a failed fan-out of one event; poison it when it reached `maxFanAttempts`. */
  eventRecordFanFailure(params: { id: string; error: string; maxFanAttempts: number; now: Date | null }): Promise<{ poisoned: boolean }>;
  /** Put poisoned events back to the relay (fan attempts reset); every poisoned one goes in bounded batches, each its own transaction. Returns the ids. */
  eventRequeue(params: { ids?: string[]; poisoned?: boolean }): Promise<string[]>;
  eventGet(params: { id: string }): Promise<EventRow | null>;
  /** Events inserted by the transaction `q` is in (for rea/testing assertions). */
  eventListInCurrentTransaction(q: Queryable): Promise<EventRow[]>;

  handlerUpsertMany(handlers: HandlerSubscription[]): Promise<void>;

  jobClaim(params: { workerId: string; targets: ClaimTarget[]; limit: number; now: Date | null }): Promise<ClaimedJob[]>;
  /** Complete running jobs; a job whose attempt moved on (it was rescued) is left alone. */
  jobCompleteMany(q: Queryable | null, params: { jobs: { id: string; attempt: number }[]; now: Date | null }): Promise<number>;
  /**
   * Record failed attempts; returns the jobs written, with when each is due now (one whose attempt
   * moved on, as it was rescued, is left alone).
   */
  jobFailMany(params: { failures: JobFailure[]; now: Date | null }): Promise<{ id: string; scheduledAt: Date }[]>;
  /**
   * Give claimed jobs that never started back to the queue, as if they had not been claimed;
   * returns the ids of the jobs released (one whose attempt moved on, as it was rescued, is left alone).
   */
  jobReleaseMany(params: { jobs: { id: string; attempt: number }[] }): Promise<string[]>;
  /** Return running jobs whose lease expired to the queue (or discard them when out of attempts). */
  jobRescue(params: { limit: number; now: Date | null }): Promise<{ rescued: number; discarded: number }>;
  jobListForEvent(params: { eventId: string }): Promise<JobRow[]>;

  /**
   * Complete a transactional handler's job in its transaction `q`, if `q` still holds the consume
   * record (the handler did not end the transaction): `consumed` false when it is gone,
   * `completed` false when the job is no longer running at that attempt (it was rescued).
   */
  jobCompleteConsumed(q: Queryable, params: { id: string; attempt: number; eventId: string; handler: string; now: Date | null }): Promise<{ consumed: boolean; completed: boolean }>;
  /**
   * Insert the consume record; false when it already existed (the effect already committed).
   * `bounds`, first in the handler's transaction on a server: end the transaction on the server once
   * idle for `idleMs` (a worker gone silent), and any lock wait in it after `lockMs`.
   */
  consumeInsert(q: Queryable, params: { eventId: string; handler: string; bounds?: { idleMs: number; lockMs: number } }): Promise<boolean>;

  /** Take or renew the leader lease; true when `leaderId` holds it afterwards. */
  leaderAttemptElect(params: { leaderId: string; ttlMs: number; now: Date | null }): Promise<boolean>;
  /**
   * Give the lease back, if `leaderId` holds it: it ends now, so any process may take it at its
   * next attempt, and the row stays (a lease that ended moments ago still shows a leader was there).
   */
  leaderResign(params: { leaderId: string; now: Date | null }): Promise<void>;

}

export interface Driver {
  readonly capabilities: DriverCapabilities;
  readonly schema: string;
  readonly executor: Executor;
  /** Admin lists and lookups (HTTP API, panel, CLI); see driver/admin.ts. */
  readonly admin: AdminExecutor;
  /** Endpoints, the webhook attempt log and webhook jobs; see driver/webhooks.ts. */
  readonly webhooks: WebhookExecutor;
  /** Retention, overview facts and job repair; see driver/operations.ts. */
  readonly operations: OperationsExecutor;
  /** Apply the numbered migrations this driver ships; safe when several processes migrate at once. */
  /** `newer`: migrations of a newer rea already applied (a breaking one makes it throw DatabaseError('too-new')). */
  /**
   * `onLockWait`: a migration's statement waited past its lock timeout for a table another
   * transaction holds, and the migration is tried again in `retryInMs` (PostgreSQL).
   */
  migrate(options?: { onLockWait?: (info: { migration: string; holders: string; retryInMs: number }) => void; lockWaitMs?: number }): Promise<{ applied: number[]; newer: number[] }>;
  /**
   * Throw DatabaseError('not-migrated') unless every migration this driver ships is applied, or
   * DatabaseError('too-new') when a newer rea applied one marked breaking; `newer`: the others.
   */
  checkMigrated(): Promise<{ newer: number[] }>;
  /**
   * Where the schema stands, refusing nothing: this driver's migrations not applied yet, and those
   * of a newer rea (`breaking`: the ones checkMigrated refuses). For reads that go on regardless
   * (rea status, rea migrate --dry-run). Optional, so a Driver of one's own written before it still
   * compiles; rea's drivers have it.
   */
  migrationStatus?(): Promise<MigrationStatus>;
  /** Run fn in a transaction on one of rea's own connections. */
  transaction<T>(fn: (q: Queryable, raw: unknown) => Promise<T>, options?: TransactionOptions): Promise<T>;
  /**
   * Turn a user's transaction handle into a Queryable, or throw UnsupportedTransactionError naming
   * `caller`, the function the user gave it to ('record()', 'expectRecorded()').
   */
  unwrapTransaction(tx: unknown, caller: string): Queryable;
  /** Run a script of several statements in one transaction (capture triggers, operator SQL). */
  execScript(sql: string): Promise<void>;
  /** Run one statement on the driver's pool (for admin scripts and tests). */
  query<R = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<{ rows: R[] }>;
  /** Connection lost, server restarting, serialization failure: worth retrying later, not the row's fault. */
  isTransientError(err: unknown): boolean;
  /**
   * A DatabaseError naming the problem when the database cannot be used at all (down, refusing, not
   * migrated); else err itself. `reaStatement`: err came from one of rea's own statements (not the
   * application's), so a column or table it lacks means the schema is behind this rea.
   */
  explainError(err: unknown, options?: { reaStatement?: boolean }): unknown;
  listen(channel: string, onNotify: (payload: string) => void): Promise<() => Promise<void>>;
  notify(channel: string, payload: string): Promise<void>;
  close(): Promise<void>;
}
