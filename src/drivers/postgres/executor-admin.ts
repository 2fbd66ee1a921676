// The AdminExecutor for PostgreSQL dialects (pg and PGlite share it): runs the admin statements
// and maps rows to rea's own types.
import type { AdminExecutor, EventListParams, EventState, EventSummary, HandlerForgetResult, HandlerSummary, HealthRead, JobListParams, JobSummary, LeaderLease } from '../../driver/admin.js';
import type { Queryable } from '../../driver/types.js';
import { within } from '../../core/within.js';
import { inBatches } from './batches.js';
import { mapJob } from './executor.js';
import { patternToLike } from './patterns.js';
import { postgresAdminStatements, type PostgresAdminStatements } from './sql-admin.js';

type Row = Record<string, any>;

/** Runs `fn` for /healthz and settles within `timeoutMs` (rejecting past it), holding nothing afterwards. */
export type HealthRunner = <T>(fn: (q: Queryable) => Promise<T>, timeoutMs: number) => Promise<T>;

export class PostgresAdminExecutor implements AdminExecutor {
  private readonly sql: PostgresAdminStatements;
  private healthPending: Promise<HealthRead> | undefined;

  /** Without `healthRunner` (PGlite: one in-process database, no pool) the health read runs on `pool`. */
  constructor(private readonly pool: Queryable, quotedSchema: string, private readonly healthRunner: HealthRunner = raceOn(pool)) {
    this.sql = postgresAdminStatements(quotedSchema);
  }

  async eventList(p: EventListParams): Promise<EventSummary[]> {
    const text = p.state === 'unfanned' ? this.sql.eventListUnfanned
      : p.state === 'fanned' ? this.sql.eventListFanned
        : p.state === 'poisoned' ? this.sql.eventListPoisoned
          : this.sql.eventListAll;
    const { rows } = await this.pool.query<Row>(text, [p.beforeId, p.minId, p.maxId, p.typePattern === null ? null : patternToLike(p.typePattern), p.subject, p.traceId, p.limit]);
    return rows.map((r) => ({
      id: r.id, type: r.type, subject: r.subject, traceId: r.trace_id, createdBy: r.created_by,
      createdAt: r.created_at, state: eventState(r), fannedOutAt: r.fanned_out_at, fanAttempts: r.fan_attempts,
      poisonedAt: r.poisoned_at, lastError: r.last_error, payloadPreview: r.payload_preview,
    }));
  }

  async jobList(p: JobListParams): Promise<JobSummary[]> {
    const { rows } = await this.pool.query<Row>(this.sql.jobList, [p.state, p.kind, p.target, p.eventId, p.beforeId, p.limit]);
    return rows.map((r) => ({ ...mapJob(r), eventType: r.event_type ?? null, eventSubject: r.event_subject ?? null }));
  }

  async jobDiscard(p: { ids: string[]; now: Date | null }): Promise<string[]> {
    if (p.ids.length === 0) return [];
    const { rows } = await this.pool.query<Row>(this.sql.jobDiscard, [p.ids, p.now]);
    return rows.map((r) => r.id as string);
  }

  async handlerNames(): Promise<string[]> {
    const { rows } = await this.pool.query<Row>(this.sql.handlerNames);
    return rows.map((r) => r.name as string);
  }

  async handlerList(p: { countLimit: number }): Promise<HandlerSummary[]> {
    // One past the limit, so a count that stopped there is told apart from one that is exactly it.
    const { rows } = await this.pool.query<Row>(this.sql.handlerList, [p.countLimit + 1]);
    return rows.map((r) => {
      const capped = (['waiting', 'running'] as const).filter((k) => r[k] > p.countLimit);
      return {
        name: r.name, patterns: r.patterns, seenAt: r.seen_at, readAt: r.read_at, capped,
        waiting: Math.min(r.waiting, p.countLimit), running: Math.min(r.running, p.countLimit),
      };
    });
  }

  async handlersSeen(p: { names: string[] }): Promise<void> {
    if (p.names.length === 0) return;
    await this.pool.query(this.sql.handlersSeen, [p.names]);
  }

  async handlerForget(p: { name: string; unseenForMs: number | null; now: Date | null }): Promise<HandlerForgetResult> {
    const { rows } = await this.pool.query<Row>(this.sql.handlerForget, [p.name, p.unseenForMs]);
    const forgotten = rows[0]!.forgotten > 0;
    const seenAt: Date | null = rows[0]!.seen_at ?? null;
    if (!forgotten && seenAt !== null) return { forgotten, cancelled: 0, seenAt };
    // Forgotten now, or its row was gone already (a forget cut short, or its jobs retried by name
    // since): its waiting jobs are cancelled either way.
    const cancelled = await inBatches('0', async (after, size) => {
      const r = (await this.pool.query<Row>(this.sql.handlerForgetCancel, [p.name, p.now, after, size])).rows[0]!;
      return { done: r.ids as string[], held: r.n as number, last: r.last_id as string };
    });
    return { forgotten, cancelled: cancelled.length, seenAt };
  }

  async leaderGet(): Promise<LeaderLease | null> {
    const { rows } = await this.pool.query<Row>(this.sql.leaderGet);
    return leaseFrom(rows[0]);
  }

  async ping(): Promise<void> {
    await this.pool.query(this.sql.ping);
  }

  healthRead(p: { timeoutMs: number }): Promise<HealthRead> {
    // One at a time: probes that arrive while a check is pending share its answer, rather than
    // each asking a database that is not answering.
    this.healthPending ??= this.healthReadOnce(p.timeoutMs).finally(() => {
      this.healthPending = undefined;
    });
    return this.healthPending;
  }

  private async healthReadOnce(timeoutMs: number): Promise<HealthRead> {
    let answered = false;
    try {
      return await this.healthRunner(async (q) => {
        await q.query(this.sql.ping);
        answered = true;
        try {
          return { lease: leaseFrom((await q.query<Row>(this.sql.leaderGet)).rows[0]) };
        } catch {
          return { lease: undefined };
        }
      }, timeoutMs);
    } catch (err) {
      if (answered) return { lease: undefined }; // the lease read ran out of time
      throw err;
    }
  }

  async adminSessionEnd(p: { id: string; expiresAt: Date }): Promise<void> {
    await this.pool.query(this.sql.adminSessionEnd, [p.id, p.expiresAt]);
  }

  async adminSessionEnded(p: { id: string }): Promise<boolean> {
    const { rows } = await this.pool.query(this.sql.adminSessionEnded, [p.id]);
    return rows.length > 0;
  }
}

function eventState(r: Row): EventState {
  if (r.poisoned_at) return 'poisoned';
  return r.fanned_out_at ? 'fanned' : 'unfanned';
}

function leaseFrom(r: Row | undefined): LeaderLease | null {
  return r ? { leaderId: r.leader_id, electedAt: r.elected_at, expiresAt: r.expires_at, readAt: r.read_at } : null;
}

function raceOn(q: Queryable): HealthRunner {
  return (fn, timeoutMs) => within(fn(q), timeoutMs);
}
