// The admin read side of the Driver seam: listing and inspecting rows for the HTTP API, the panel
// and the CLI. Kept apart from the hot-path Executor so the relay and workers never depend on it.
import type { JobKind, JobRow, JobState } from './types.js';

export type EventState = 'unfanned' | 'fanned' | 'poisoned';
export const EVENT_STATES: readonly EventState[] = ['unfanned', 'fanned', 'poisoned'];

/** Already validated (see core/filters.ts); time bounds arrive as UUIDv7 id bounds. */
export interface EventListParams {
  /** An exact type or a `prefix.*` pattern (each driver turns it into its own match). */
  typePattern: string | null;
  subject: string | null;
  traceId: string | null;
  state: EventState | null;
  /** Inclusive lower id bound (the smallest UUIDv7 of the `since` millisecond). */
  minId: string | null;
  /** Exclusive upper id bound. */
  maxId: string | null;
  /** Keyset cursor: only ids strictly below it (the list is newest first). */
  beforeId: string | null;
  limit: number;
}

export interface EventSummary {
  id: string;
  type: string;
  subject: string | null;
  traceId: string | null;
  createdBy: string | null;
  createdAt: Date;
  state: EventState;
  fannedOutAt: Date | null;
  fanAttempts: number;
  poisonedAt: Date | null;
  lastError: string | null;
  /** The first 200 characters of the payload's JSON text; the full payload is on the event itself. */
  payloadPreview: string;
}

export interface JobListParams {
  state: JobState | null;
  kind: JobKind | null;
  /** Handler name (or endpoint id for webhook jobs). */
  target: string | null;
  eventId: string | null;
  /** Keyset cursor: only job ids strictly below it (newest first). */
  beforeId: string | null;
  limit: number;
}

export interface JobSummary extends JobRow {
  /** Null when retention already removed the event. */
  eventType: string | null;
  eventSubject: string | null;
}

export interface LeaderLease {
  leaderId: string;
  electedAt: Date;
  expiresAt: Date;
  /** The database's clock when read, so "seen recently" never mixes two clocks. */
  readAt: Date;
}

/** A subscription as the handlers table holds it, with how much work waits for it. */
export interface HandlerSummary {
  name: string;
  patterns: string[];
  /** When a running worker last had this handler (its heartbeat). */
  seenAt: Date;
  /**
   * Waiting (available, retryable) and running jobs, each counted up to the exact-count limit
   * (overview.exactCountLimit); a count that stopped there is named in `capped`, and there are more.
   */
  waiting: number;
  running: number;
  /** The counts that reached the exact-count limit: the real figure is above it. */
  capped: ('waiting' | 'running')[];
  /** The database's clock when read. */
  readAt: Date;
}

export interface HandlerForgetResult {
  /** False when no such handler is stored (its waiting jobs, if any, are cancelled all the same), or it was seen within `unseenForMs`. */
  forgotten: boolean;
  /** Waiting jobs moved to cancelled. */
  cancelled: number;
  /** The handler's heartbeat when it was refused as still seen; null when it does not exist. */
  seenAt: Date | null;
}

/** What /healthz reads. */
export interface HealthRead {
  /** null: no lease row; undefined: the database answered but the lease could not be read (not migrated, no permission, no answer in time). */
  lease: LeaderLease | null | undefined;
}

export interface AdminExecutor {
  eventList(params: EventListParams): Promise<EventSummary[]>;
  jobList(params: JobListParams): Promise<JobSummary[]>;
  /** Move waiting jobs (available, retryable) to discarded by an operator; returns the ids moved. */
  jobDiscard(params: { ids: string[]; now: Date | null }): Promise<string[]>;
  handlerNames(): Promise<string[]>;
  handlerList(params: { countLimit: number }): Promise<HandlerSummary[]>;
  /** The heartbeat of the handlers a running worker has (now, by the database's clock). */
  handlersSeen(params: { names: string[] }): Promise<void>;
  /**
   * Delete a handler's row (the relay stops making jobs for it), only when no running worker has
   * had it for `unseenForMs` by the database's clock (null: whatever its heartbeat); then cancel
   * its waiting jobs in bounded batches, each its own transaction. A handler whose row is gone
   * already has its waiting jobs cancelled all the same (a forget cut short, or jobs retried by
   * name since).
   */
  handlerForget(params: { name: string; unseenForMs: number | null; now: Date | null }): Promise<HandlerForgetResult>;
  leaderGet(): Promise<LeaderLease | null>;
  /** One trivial round trip: the database answers. */
  ping(): Promise<void>;
  /**
   * For /healthz: a round trip, then the leader lease, within `timeoutMs`, and never on a
   * connection rea's own work or the application's transactions need. Rejects when the database
   * does not answer in time. Checks asked for while one is pending share its answer. Optional, so
   * a Driver written before it still works: without it /healthz races ping() and leaderGet()
   * against the timeout on the driver's own connections.
   */
  healthRead?(params: { timeoutMs: number }): Promise<HealthRead>;
  /**
   * An admin panel session was logged out: refuse it until `expiresAt` (when it would have ended
   * anyway). `id` is a hash of the session, never the cookie. Also forgets sessions already expired.
   */
  adminSessionEnd(params: { id: string; expiresAt: Date }): Promise<void>;
  /** Whether the session `id` was logged out (one primary-key lookup). */
  adminSessionEnded(params: { id: string }): Promise<boolean>;
}
