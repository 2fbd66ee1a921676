// The OperationsExecutor for PostgreSQL dialects (pg and PGlite share it): retention deletes,
// the overview's capped counts, estimates and table sizes, and job repair.
import type {
  AppTableName, CountFigure, HandlerScheduleRow, OperationsExecutor, OverviewFacts, ReplayFilterParams, ReplayToHandlerResult, RetentionTarget,
} from '../../driver/operations.js';
import { JOB_STATES, type JobState, type Queryable } from '../../driver/types.js';
import { inBatches } from './batches.js';
import { patternToLike } from './patterns.js';
import { postgresOperationsStatements, type PostgresOperationsStatements } from './sql-operations.js';

type Row = Record<string, any>;

export class PostgresOperationsExecutor implements OperationsExecutor {
  private readonly sql: PostgresOperationsStatements;

  constructor(
    private readonly pool: Queryable,
    private readonly schema: string,
    quotedSchema: string,
    /** The driver's transactions: events retention takes two statements in one. */
    private readonly transaction: <T>(fn: (q: Queryable) => Promise<T>) => Promise<T>,
    /** For VACUUM, which takes as long as the table needs: no deadline (see deadline.ts). */
    private readonly untimed: Queryable = pool,
  ) {
    this.sql = postgresOperationsStatements(quotedSchema);
  }

  async autovacuumEnabled(): Promise<boolean> {
    const { rows } = await this.pool.query<Row>(this.sql.autovacuumEnabled);
    return rows[0]?.on === true;
  }

  async vacuumTables(): Promise<string[]> {
    const done: string[] = [];
    // VACUUM cannot run in a transaction block: each runs as its own statement on the pool.
    for (const text of this.sql.vacuumTables) {
      await this.untimed.query(text);
      done.push(text.split('.').pop()!);
    }
    return done;
  }

  async retentionDelete(p: { target: RetentionTarget; limit: number; now: Date | null }): Promise<number> {
    const t = p.target;
    if (t.kind === 'events') {
      return this.transaction(async (q) => {
        const { rows } = await q.query<Row>(this.sql.retentionLockEvents, [p.now, t.olderThanMs, p.limit]);
        const ids = (rows[0]?.ids ?? []) as string[];
        if (ids.length === 0) return 0;
        // Fewer than it locked when a job became waiting in between: the pass then ends early
        // (a short batch), and the next one goes on.
        const deleted = await q.query<Row>(t.archive ? this.sql.retentionArchiveEvents : this.sql.retentionDeleteEvents, t.archive ? [ids, p.now] : [ids]);
        return deleted.rows[0]?.n ?? 0;
      });
    }
    const [text, params] = this.retentionStatement(p.target, 'delete', p.limit, p.now);
    const { rows } = await this.pool.query<Row>(text, params);
    return rows[0]?.n ?? 0;
  }

  async retentionCount(p: { target: RetentionTarget; now: Date | null }): Promise<number> {
    const [text, params] = this.retentionStatement(p.target, 'count', null, p.now);
    const { rows } = await this.pool.query<Row>(text, params);
    return rows[0]?.n ?? 0;
  }

  private retentionStatement(t: RetentionTarget, mode: 'delete' | 'count', limit: number | null, now: Date | null): [string, unknown[]] {
    const base = [now, t.olderThanMs, limit];
    const del = mode === 'delete';
    switch (t.kind) {
      case 'events':
        if (del) throw new Error('events retention runs in a transaction (retentionDelete)');
        return [this.sql.retentionCountEvents, base];
      case 'events_archive':
        return [del ? this.sql.retentionDeleteArchive : this.sql.retentionCountArchive, base];
      case 'jobs':
        return [del ? this.sql.retentionDeleteJobs : this.sql.retentionCountJobs, [...base, t.state]];
      case 'consumes':
        return [del ? this.sql.retentionDeleteConsumes : this.sql.retentionCountConsumes, base];
      case 'app': {
        const table = quoteTable(t.table);
        const column = quoteIdent(t.timeColumn);
        return [del ? this.sql.retentionDeleteApp(table, column) : this.sql.retentionCountApp(table, column), base];
      }
    }
  }

  async appTable(p: { table: AppTableName; column: string }): Promise<{ columnType: string | null; split: boolean; schema: string } | null> {
    const { rows } = await this.pool.query<Row>(this.sql.appTable, [quoteTable(p.table), p.column]);
    const r = rows[0];
    return r ? { columnType: r.column_type ?? null, split: r.split === true, schema: r.schema as string } : null;
  }

  async overviewFacts(p: { exactLimit: number; backlogThreshold: number; handlerUnattendedMs: number; jobsWaitingMs: number }): Promise<OverviewFacts> {
    const cap = p.exactLimit + 1;
    // Where the backlog crossed its threshold is an OFFSET walk of that many index entries: asked
    // only within the exact limit, as far as a count walks. Past it the count is an estimate too.
    const crossing = p.backlogThreshold <= p.exactLimit ? p.backlogThreshold : -1;
    const [{ rows }, sizes] = await Promise.all([
      this.pool.query<Row>(this.sql.overviewFacts, [cap, crossing, p.handlerUnattendedMs, p.jobsWaitingMs]),
      this.pool.query<Row>(this.sql.tableSizes, [this.schema]),
    ]);
    const r = rows[0]!;
    const figure = async (key: string): Promise<CountFigure> => {
      const exact = Number(r[key]);
      if (exact < cap) return { value: exact, estimated: false };
      // Past the limit the exact count would walk every row: ask the planner, never below what we saw.
      return { value: Math.max(cap, await this.plannerRows(this.sql.estimate[key]!)), estimated: true };
    };
    const jobs = {} as Record<JobState, CountFigure>;
    for (const state of JOB_STATES) jobs[state] = await figure(state);
    return {
      readAt: r.read_at,
      backlog: await figure('backlog'),
      poisoned: await figure('poisoned'),
      oldestUnfannedAt: r.oldest_unfanned_at ?? null,
      backlogCrossedAt: crossing < 0 ? null : r.backlog_crossed_at ?? null,
      poisonedSince: r.poisoned_since ?? null,
      jobs,
      discardedSince: r.discarded_since ?? null,
      endpointsDisabled: Number(r.endpoints_disabled ?? 0),
      endpointsDisabledSince: r.endpoints_disabled_since ?? null,
      unattendedHandlers: (typeof r.unattended_handlers === 'string' ? JSON.parse(r.unattended_handlers) : r.unattended_handlers ?? [])
        .map((h: Row) => ({ name: h.name as string, seenAt: new Date(h.seen_at), waiting: Number(h.waiting), stored: h.stored !== false })),
      waitingJobs: (typeof r.waiting_jobs === 'string' ? JSON.parse(r.waiting_jobs) : r.waiting_jobs ?? [])
        .map((w: Row) => ({ kind: w.kind as 'handler' | 'webhook', target: (w.target as string | null) ?? null, dueAt: new Date(w.due_at) })),
      tables: sizes.rows.map((t) => ({ name: t.name as string, totalBytes: Number(t.total_bytes) })),
    };
  }

  private async plannerRows(explain: string): Promise<number> {
    const { rows } = await this.pool.query<Row>(explain);
    const cell = Object.values(rows[0] ?? {})[0];
    const plan = typeof cell === 'string' ? JSON.parse(cell) : cell;
    return Math.round(Number(plan?.[0]?.Plan?.['Plan Rows'] ?? 0));
  }

  async handlerSchedules(): Promise<HandlerScheduleRow[]> {
    const { rows } = await this.pool.query<Row>(this.sql.handlerSchedules);
    return rows.map((r) => ({ name: r.name, maxAttempts: r.max_attempts, leaseMs: r.lease_ms }));
  }

  async jobRetry(p: { ids?: string[]; state?: 'discarded' | 'cancelled'; handler?: string; webhookMaxAttempts: number; now: Date | null }): Promise<string[]> {
    const ids = p.ids;
    if (ids) {
      if (ids.length === 0) return [];
      return this.transaction(async (q) => {
        await q.query(this.sql.jobRetryLockIds, [ids]);
        const { rows } = await q.query<Row>(this.sql.jobRetryByIds, [ids, p.now, p.webhookMaxAttempts]);
        return rows.map((r) => r.id as string).sort(byNumber);
      });
    }
    // One transaction per batch, oldest first; a job a batch retried is behind the cursor, so one
    // that fails again meanwhile is not retried twice by this call.
    const state = p.state ?? 'discarded';
    const handler = p.handler ?? null;
    const retried = await inBatches('0', (after, size) => this.transaction(async (q) => {
      const batch = (await q.query<Row>(this.sql.jobRetryLockBatch, [state, handler, after, size])).rows[0]!;
      const done = batch.n === 0 ? []
        : (await q.query<Row>(this.sql.jobRetryBatch, [state, p.now, handler, batch.ids, p.webhookMaxAttempts])).rows.map((r) => r.id as string);
      return { done, held: batch.n as number, last: batch.last_id as string };
    }));
    return retried.sort(byNumber);
  }

  async eventReplayToHandler(p: { eventId: string; handler: string; now: Date | null }): Promise<ReplayToHandlerResult> {
    return this.transaction(async (q) => {
      const locked = (await q.query<Row>(this.sql.eventReplayLock, [p.eventId])).rows[0];
      if (!locked) return { found: false };
      const event = { found: true as const, type: locked.type as string, fanned: locked.fanned === true, poisoned: locked.poisoned === true };
      // Not yet fanned out (or poisoned): the relay delivers it to its handlers; a job made now would run it twice.
      if (!event.fanned || event.poisoned) return { ...event, patterns: null, subscribes: false, waitingJobId: null, jobId: null };
      const r = (await q.query<Row>(this.sql.eventReplayToHandler, [p.eventId, p.handler, event.type, p.now])).rows[0]!;
      return { ...event, patterns: (r.patterns as string[] | null) ?? null, subscribes: r.subscribes === true, waitingJobId: r.waiting_job_id ?? null, jobId: r.job_id ?? null };
    });
  }

  async eventReplayBatch(p: { handler: string; afterId: string | null; filter: ReplayFilterParams; limit: number; now: Date | null }): Promise<{ replayed: number; skipped: number; lastId: string | null }> {
    const f = p.filter;
    return this.transaction(async (q) => {
      const { rows } = await q.query<Row>(this.sql.eventReplayBatchLock, [
        p.handler, p.afterId, f.minId, f.maxId, f.typePattern === null ? null : patternToLike(f.typePattern), f.subject, f.traceId, p.limit,
      ]);
      if (rows.length === 0) return { replayed: 0, skipped: 0, lastId: null };
      const ids = rows.map((r) => r.id as string);
      const r = (await q.query<Row>(this.sql.eventReplayBatch, [p.handler, ids, p.now])).rows[0]!;
      return { replayed: r.replayed, skipped: r.skipped, lastId: ids.at(-1)! };
    });
  }

  async handlerKnown(p: { name: string }): Promise<boolean> {
    const { rows } = await this.pool.query<Row>(this.sql.handlerKnown, [p.name]);
    return rows[0]?.known === true;
  }

  async jobCancel(p: { ids: string[]; now: Date | null }): Promise<string[]> {
    if (p.ids.length === 0) return [];
    const { rows } = await this.pool.query<Row>(this.sql.jobCancel, [p.ids, p.now]);
    return rows.map((r) => r.id as string).sort(byNumber);
  }

  async jobStates(p: { ids: string[] }) {
    if (p.ids.length === 0) return [];
    const { rows } = await this.pool.query<Row>(this.sql.jobStates, [p.ids]);
    return rows.map((r) => ({
      id: r.id as string, state: r.state as JobState, attempt: Number(r.attempt), attemptedBy: (r.attempted_by as string | null) ?? null, scheduledAt: r.scheduled_at as Date,
      eventFound: r.event_found === true, waitingJobId: (r.waiting_job_id as string | null) ?? null,
      lastError: r.last_error_message == null ? null : { name: (r.last_error_name as string | null) ?? undefined, message: r.last_error_message as string },
    }));
  }
}

const byNumber = (a: string, b: string) => Number(a) - Number(b);

// Names were checked to be plain identifiers before they got here (maintenance/retention.ts);
// quoting keeps mixed case exact and would neutralize anything that slipped through.
function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

function quoteTable(t: AppTableName): string {
  return t.schema ? `${quoteIdent(t.schema)}.${quoteIdent(t.table)}` : quoteIdent(t.table);
}
