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

export interface AdminExecutor {
  eventList(params: EventListParams): Promise<EventSummary[]>;
  jobList(params: JobListParams): Promise<JobSummary[]>;
  /** Move waiting jobs (available, retryable) to discarded by an operator; returns the ids moved. */
  jobDiscard(params: { ids: string[]; now: Date | null }): Promise<string[]>;
  handlerNames(): Promise<string[]>;
  leaderGet(): Promise<LeaderLease | null>;
  /** One trivial round trip: the database answers. */
  ping(): Promise<void>;
}
